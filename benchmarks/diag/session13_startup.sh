#!/bin/bash
# Next session's start-up call (issue 14), ready to run: NVDEC, 16 workers, W1 gpu-quick, three
# loaders per process, with the first batch's timeline (when each unit was handed out,
# demuxed, started and filled, and each GOP decoded on which thread:
# benchmarks/diag/startup_timeline.py), with and without CUDA started first. About 90 s.
set -u
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt
timeout 200 python3 -c "from vidloader.bench import prepare_dataset as p; p('W1', 'gpu-quick', data_dir='/tmp/bench-data')" > $OUT/prepare_W1.log 2>&1
echo "prepared W1 rc $?"
for tag in plain cudafirst; do
  extra=""; [ $tag = cudafirst ] && extra="--cuda-first"
  timeout 80 python3 benchmarks/startup.py --backend nvdec --workers 16 --scale gpu-quick --loaders 3 \
    --data-dir /tmp/bench-data --hang-dump 75 --timeline $extra --out $OUT/startup_timeline_$tag.json \
    > $OUT/startup_timeline_$tag.log 2>&1
  echo "== $tag"; grep -E "^loader|^CUDA" $OUT/startup_timeline_$tag.log | cut -c1-600
done
