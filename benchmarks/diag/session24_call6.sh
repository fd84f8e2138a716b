#!/bin/bash
# Session 24, call 6 (~230 s, carry .whl): PyAV with NVDEC (`pyav-nvdec`) and vidloader-nvdec
# on W1 gpu-quick's uniform random frames in ONE call (call 3 measured the sequential pair;
# its random vidloader-nvdec run was cut by a 35 s limit too short for a 9 s first batch).
set -u
export PYTHONUNBUFFERED=1
RES=/tmp/call6; rm -rf "$RES" && mkdir -p "$RES"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/gpu.txt"
timeout 120 python3 -c "from vidloader.bench import prepare_dataset as p; p('W1', 'gpu-quick', data_dir='/tmp/bench-data')" > "$OUT/prepare_W1.log" 2>&1
echo "prepared W1 gpu-quick: rc $? at ${SECONDS} s"
bench() {  # workload backend time-limit timed-batches
  timeout $(($3 + 5)) python3 -m vidloader.bench run --scale gpu-quick --dataset W1 \
    --data-dir /tmp/bench-data --out "$RES/$2" --workers 16 --no-plot --batches "$4" \
    --max-seconds 6 --timeout "$3" --workload "$1" --backends "$2" 2>&1 | grep -v "^Svt" >> "$OUT/bench.log"
  echo "[$1] $2 exit ${PIPESTATUS[0]} at ${SECONDS} s"
}
bench random vidloader-nvdec 75 24
bench random pyav-nvdec 70 3
python3 benchmarks/diag/bench_summary.py "$RES" | tee "$OUT/summary.txt"
tar -czf "$OUT/bench.tgz" -C "$RES" .
echo "done at ${SECONDS} s"
