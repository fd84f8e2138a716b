#!/bin/bash
# Session 11, call 2: (1) NVDEC start-up profiled on an idle machine, and how long NVDEC
# decoders take to start alone and 16 at once (issue 14: first batch 2.25 s warm, 3.54 s
# cold in session11-1); (2) the combo on W4 clips at the "gpu" scale with 15 s windows
# (session11-1's 8 s windows were shorter than a CPU unit: CPU alone swung 608-1,099).
set -u
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt
prep() { timeout 200 python3 -c "from vidloader.bench import prepare_dataset as p; p('$1', '$2', data_dir='/tmp/bench-data')" > $OUT/prepare_$1.log 2>&1; echo "prepared $1 rc $?" >> $OUT/prepare_$1.log; }
prep W1 gpu-quick & P1=$!
prep W4 gpu & P4=$!
wait $P1 $P4; tail -qn1 $OUT/prepare_W1.log $OUT/prepare_W4.log
timeout 40 python3 benchmarks/diag/nvdec_session_init.py /tmp/bench-data/W1-gpu-quick-*/ $OUT/session_init.json 2>&1 | cut -c1-400
timeout 50 python3 benchmarks/startup.py --backend nvdec --workers 16 --scale gpu-quick --loaders 2 \
  --data-dir /tmp/bench-data --profile --out $OUT/startup_nvdec_profile.json > $OUT/startup_nvdec_profile.log 2>&1
grep -E "^loader" $OUT/startup_nvdec_profile.log
timeout 290 python3 -m vidloader.bench._combo_run --workloads W4-clips --scale gpu \
  --variants cpu,nvdec,combo,combo-within --warmup-s 10 --window-s 15 --windows 3 \
  --out $OUT/combo_w4.json 2>&1 | grep -v "^Svt" > $OUT/combo_w4.log
grep -E "over|frames_per_s" $OUT/combo_w4.log | cut -c1-330
