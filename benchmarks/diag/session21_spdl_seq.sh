#!/bin/bash
# Session 21, call 12 (~4 min, carry .whl and SPDL's wheels), issue 16 items 2 and 5: W1 in
# stream order with the session's one-process NVDEC defaults (stacks of 16, no frame cache,
# surface copies by cudaMemcpy2DAsync; call 11: 2,704-2,814 frames/s against 2,169-2,685
# without the new copy) against SPDL (2,390-2,400 in calls 4 and 9) and the raw ceiling, one
# call, `bench run` each, 16 workers.
set -u
export PYTHONUNBUFFERED=1
RES=/tmp/spdl-seq; rm -rf "$RES" && mkdir -p "$RES"
source benchmarks/diag/spdl_env.sh
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/gpu.txt"
timeout 150 python3 -c "from vidloader.bench import prepare_dataset as p; p('W1', 'gpu-quick', data_dir='/tmp/bench-data')" > "$OUT/prepare.log" 2>&1
echo "prepared W1: rc $? at ${SECONDS} s"
bench() {  # backend round
  timeout 60 python3 -m vidloader.bench run --scale gpu-quick --dataset W1 --data-dir /tmp/bench-data \
    --out "$RES/sequential-$1-$2" --workers 16 --no-plot --batches 300 --max-seconds 8 --timeout 50 \
    --workload sequential --backends $1 2>&1 | grep -v "^Svt" >> "$OUT/bench.log"
  echo "$1 round $2 done at ${SECONDS} s"
}
bench pynvc-threads 1
bench spdl 1
bench vidloader-nvdec 1
python3 benchmarks/diag/bench_summary.py "$RES" 2>&1 | tee "$OUT/summary.txt"
tar -czf "$OUT/bench.tgz" -C "$RES" .
echo "done at ${SECONDS} s"
