#!/bin/bash
# Session 18, call 2 (~6 min, carry .whl), issue 16 item 4: W4-clips-head (SPDL's Kinetics
# setting) on NVDEC as one loader of 16 workers, then as 2 loaders of 8 and 4 loaders of 4
# workers at once, each in its own process (a GIL each), windows aligned (_combo_run's pairs).
set -u
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt
timeout 200 python3 -c "from vidloader.bench import prepare_dataset as p; p('W4', 'gpu', data_dir='/tmp/bench-data')" > /dev/null 2>&1
echo "prepared W4 rc $? at ${SECONDS} s"
timeout 360 python3 -m vidloader.bench._combo_run --workloads W4-clips-head --scale gpu \
  --variants nvdec,nvdec-w8+nvdec-w8,nvdec-w4+nvdec-w4+nvdec-w4+nvdec-w4 --pair-slack-s 25 \
  --warmup-s 3 --window-s 5 --windows 3 --out $OUT/head_scaling.json 2>&1 \
  | grep -v "^Svt" > $OUT/head_scaling.log
grep -E "summary" $OUT/head_scaling.log | cut -c1-300
echo "done at ${SECONDS} s"
