#!/bin/bash
# Session 16, call 4 (issue 13): call 1 found that beside a CPU loader, NVDEC alone falls to
# 54% of its pace whether the CPU side runs at nice 0 or 10, while the CPU side keeps its
# own: do the threads feeding NVDEC wait for a core? Here the combo's CPU decoders are kept
# off 4 cores (COMBO_RESERVED_CORES 4), beside CPU and NVDEC alone, the two at once in two
# processes, and the combo as in call 1. W4 clips at the gpu scale, 16 workers, 8 s warm-up,
# three 10 s windows. ~6 min, carry .whl.
source "$(dirname "$0")/device_prepare.sh" W4 gpu
timeout 420 python3 -m vidloader.bench._combo_run --workloads W4-clips --scale gpu \
  --variants cpu,nvdec,cpu+nvdec,combo-horizon0,combo-h0-reserve4 \
  --warmup-s 8 --window-s 10 --windows 3 --pair-slack-s 15 \
  --out $OUT/combo_reserve_w4.json 2>&1 | grep -v "^Svt" > $OUT/combo_reserve_w4.log
grep -E "summary|/ \(" $OUT/combo_reserve_w4.log
