#!/bin/bash
# Session 13: does the NVDEC loader's first batch come sooner with fewer decoders (each
# decoder thread's first GOP waits for the NVDEC sessions started together, session13-1)?
# W1 gpu-quick, 16 workers, 3 loaders per process, 4 / 8 / 16 decoders, with timelines.
set -u
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt
timeout 200 python3 -c "from vidloader.bench import prepare_dataset as p; p('W1', 'gpu-quick', data_dir='/tmp/bench-data')" > $OUT/prepare_W1.log 2>&1
echo "prepared W1 rc $?"
for n in 16 8 4 16; do
  timeout 80 python3 benchmarks/startup.py --backend nvdec --workers 16 --nvdec-decoders $n --scale gpu-quick \
    --loaders 3 --data-dir /tmp/bench-data --hang-dump 75 --timeline --out $OUT/startup_dec$n.json \
    > $OUT/startup_dec$n.log 2>&1
  echo "== $n decoders"; grep -E "^loader" $OUT/startup_dec$n.log | cut -c1-330
done
