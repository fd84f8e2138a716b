#!/bin/bash
# Session 11, call 4: the combo on W4 clips at the gpu scale: units of a whole batch
# (combo-unit8) and the horizon rule off (combo-horizon0) beside CPU and NVDEC alone; the
# default combo gave 0.56 and 0.51 of the sum in session11-2 and -3 (issue 13).
set -u
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt
timeout 150 python3 -c "from vidloader.bench import prepare_dataset as p; p('W4', 'gpu', data_dir='/tmp/bench-data')" > $OUT/prepare_W4.log 2>&1
echo "prepared rc $?"
timeout 250 python3 -m vidloader.bench._combo_run --workloads W4-clips --scale gpu \
  --variants cpu,nvdec,combo-unit8,combo-horizon0 --warmup-s 8 --window-s 10 --windows 3 \
  --out $OUT/combo_w4.json 2>&1 | grep -v "^Svt" > $OUT/combo_w4.log
grep -E "over|frames_per_s" $OUT/combo_w4.log | cut -c1-200
