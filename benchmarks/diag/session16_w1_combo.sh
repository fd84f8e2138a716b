#!/bin/bash
# Next session (issue 13): the combo on W1 uniform random frames (1080p, batch 128 at 224²)
# with and without the horizon rule, beside the CPU and NVDEC alone, in one call. W4 clips did
# best without the rule in sessions 11-15 (0.78-0.80 against 0.51-0.67 with it); the rule
# stays the default because W1 reached 0.94 with it (combo-6) and has never run without it.
# ~7 min, carry .whl.
source "$(dirname "$0")/device_prepare.sh" W1 gpu-quick
timeout 420 python3 -m vidloader.bench._combo_run --workloads W1-random --scale gpu-quick \
  --variants cpu,nvdec,combo,combo-horizon0 --warmup-s 8 --window-s 12 --windows 3 \
  --out $OUT/combo_w1.json 2>&1 | grep -v "^Svt" > $OUT/combo_w1.log
grep -E "summary" $OUT/combo_w1.log
