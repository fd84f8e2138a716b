#!/bin/bash
# Session 15, second combo call (issue 13): NVDEC now takes over the CPU unit that holds the
# oldest batch whenever it is older than every unit queued or in flight on NVDEC (session15-1:
# considered only with nothing queued, it never happened: 0 steals in every run). W4 clips at
# the gpu scale, 16 workers, 8 s warm-up, three 15 s windows; cpu and nvdec alone in the same
# call for the ratio. Then start-up of the CPU backend with 16 workers (its workers no longer
# import torch). ~8 min, carry .whl.
set -u
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt
timeout 150 python3 -c "from vidloader.bench import prepare_dataset as p; p('W4', 'gpu', data_dir='/tmp/bench-data')" > $OUT/prepare_W4.log 2>&1
echo "prepared rc $?"
timeout 330 python3 -m vidloader.bench._combo_run --workloads W4-clips --scale gpu \
  --variants cpu,nvdec,combo-h0-steal,combo-horizon0 \
  --warmup-s 8 --window-s 15 --windows 3 \
  --out $OUT/combo_w4.json 2>&1 | grep -v "^Svt" > $OUT/combo_w4.log
grep -E "summary" $OUT/combo_w4.log
timeout 90 python3 -c "from vidloader.bench import prepare_dataset as p; p('W1', 'gpu-quick', data_dir='/tmp/bench-data')" > /dev/null 2>&1
timeout 90 python3 benchmarks/startup.py --backend cpu --workers 16 --scale gpu-quick \
  --data-dir /tmp/bench-data --out $OUT/startup_cpu16.json 2>&1 | grep "^loader"
