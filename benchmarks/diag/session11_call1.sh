#!/bin/bash
# Session 11, call 1: (1) start-up with the iterator kept alive (issue 14), nvdec / cpu /
# combo, 16 workers, W1; (2) the combo on W4 clips at the "gpu" scale (75 videos of 10 s:
# an epoch of ~2,500 batches, so no epoch boundary falls in the timed windows, which at
# gpu-quick it did), 8 s windows, with the demux workers on top of num_workers (new default)
# against out of them (combo-within) and a fixed 0.4 share (issue 13).
set -u
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt
prep() { timeout 260 python3 -c "from vidloader.bench import prepare_dataset as p; p('$1', '$2', data_dir='/tmp/bench-data')" > $OUT/prepare_$1.log 2>&1; echo "prepared $1 rc $?" >> $OUT/prepare_$1.log; }
prep W1 gpu-quick & P1=$!
prep W4 gpu & P4=$!
wait $P1 $P4; tail -qn1 $OUT/prepare_W1.log $OUT/prepare_W4.log
timeout 230 python3 -m vidloader.bench._combo_run --workloads W4-clips --scale gpu \
  --variants cpu,nvdec,combo,combo-within,combo-share-0.4 --warmup-s 8 --window-s 8 --windows 3 \
  --out $OUT/combo_w4.json 2>&1 | grep -v "^Svt" > $OUT/combo_w4.log
grep -E "over|frames_per_s" $OUT/combo_w4.log | cut -c1-330
for backend in nvdec cpu combo; do
  timeout 45 python3 benchmarks/startup.py --backend $backend --workers 16 --scale gpu-quick --loaders 3 \
    --data-dir /tmp/bench-data --hang-dump 40 --out $OUT/startup_$backend.json > $OUT/startup_$backend.log 2>&1
  echo "== $backend"; grep -E "^loader" $OUT/startup_$backend.log; grep -c "^Thread 0x" $OUT/startup_$backend.log
done
