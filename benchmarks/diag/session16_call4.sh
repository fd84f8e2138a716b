#!/bin/bash
# Session 16, call 4 (issue 13): call 1 found that beside a CPU loader, NVDEC alone falls to
# 54% of its pace whether the CPU side runs at nice 0 or 10, while the CPU side keeps its
# own: the threads feeding NVDEC wait for a core. Here the CPU side is kept off 4 cores, in
# the pair (cpu~4+nvdec) and in the combo (COMBO_RESERVED_CORES 2 and 4), beside CPU and NVDEC
# alone, the plain pair and the combo as in call 1. W4 clips at the gpu scale, 16 workers,
# 8 s warm-up, three 10 s windows. ~8 min, carry .whl.
source "$(dirname "$0")/device_prepare.sh" W4 gpu
timeout 520 python3 -m vidloader.bench._combo_run --workloads W4-clips --scale gpu \
  --variants cpu,nvdec,cpu+nvdec,cpu~4+nvdec,combo-horizon0,combo-h0-reserve2,combo-h0-reserve4 \
  --warmup-s 8 --window-s 10 --windows 3 --pair-slack-s 15 \
  --out $OUT/combo_reserve_w4.json 2>&1 | grep -v "^Svt" > $OUT/combo_reserve_w4.log
grep -E "summary|/ \(" $OUT/combo_reserve_w4.log
