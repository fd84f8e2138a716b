#!/bin/bash
# Session 10, call 3: where the NVDEC loader's first batch goes (issue 14: <= 2 s with 16
# workers on W1; session 8: 2.55 s): benchmarks/startup.py --profile, 3 loaders in one process
# (the first pays the fork server and CUDA), NVDEC then CPU for comparison.
set -u
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt
timeout 110 python3 -c "from vidloader.bench import prepare_dataset as p; p('W1', 'gpu-quick', data_dir='/tmp/bench-data')" > /dev/null 2>&1
for backend in nvdec cpu; do
  timeout 120 python3 benchmarks/startup.py --backend $backend --workers 16 --scale gpu-quick \
    --loaders 3 --data-dir /tmp/bench-data --profile --out $OUT/startup_$backend.json 2>&1 | grep -E "^loader"
done
