#!/bin/bash
# Session 10, call 8: NVDEC start-up with the iterator kept alive (issue 14; session10-7's
# 3.1-4.4 s included draining the units in flight), and the combo on W4 clips (issue 13).
set -u
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt
timeout 200 python3 -c "from vidloader.bench import prepare_dataset as p; p('W1', 'gpu-quick', data_dir='/tmp/bench-data')" > $OUT/prepare.log 2>&1
tail -1 $OUT/prepare.log | cut -c1-200
for backend in nvdec cpu; do
  timeout 80 python3 benchmarks/startup.py --backend $backend --workers 16 --scale gpu-quick --loaders 3 \
    --data-dir /tmp/bench-data --hang-dump 70 --out $OUT/startup_$backend.json > $OUT/startup_$backend.log 2>&1
  echo "== $backend"; grep -E "^loader" $OUT/startup_$backend.log; grep -c "^Thread 0x" $OUT/startup_$backend.log
done
timeout 200 python3 -m vidloader.bench._combo_run --workloads W4-clips --scale gpu-quick \
  --variants cpu,nvdec,combo --warmup-s 6 --out $OUT/combo_w4.json 2>&1 | grep -v "^Svt" > $OUT/combo_w4.log
grep -E "over|frames_per_s" $OUT/combo_w4.log | cut -c1-260
