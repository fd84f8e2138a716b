#!/bin/bash
# Next session, issue 13 (~8 min, carry .whl): the combo's reserved cores, one setting measured
# once so far (4: 2,036 against 1,807 frames/s, session16-4). W4 clips at the gpu scale: the
# pair (CPU and NVDEC loaders at once), the combo as shipped (horizon rule on, 4 cores kept),
# and without the horizon rule with 0, 2, 4 and 6 cores kept. 8 s warm-up, three 10 s windows.
source "$(dirname "$0")/device_prepare.sh" W4 gpu
timeout 500 python3 -m vidloader.bench._combo_run --workloads W4-clips --scale gpu \
  --variants cpu+nvdec,combo,combo-h0-reserve0,combo-h0-reserve2,combo-h0-reserve4,combo-h0-reserve6 \
  --warmup-s 8 --window-s 10 --windows 3 --pair-slack-s 15 \
  --out $OUT/combo_reserve_w4.json 2>&1 | grep -v "^Svt" > $OUT/combo_reserve_w4.log
grep -E "summary|/ \(" $OUT/combo_reserve_w4.log
