#!/bin/bash
# WRITTEN IN SESSION 23, NOT YET RUN (the session had no device time left to start a machine).
# Session 23, call 5 (the session's last ~270 s of device time): PyAV with NVDEC (`pyav-nvdec`,
# the dataloader exercise's GPU path) and vidloader-nvdec in ONE call, on W1 gpu-quick
# (session 12 ran pyav-nvdec alone: no same-call ratio existed), and the new `torchcodec-cuda`
# row (torchcodec is not installed on the GPU machine: its JSON row says why).
set -u
export PYTHONUNBUFFERED=1
DEADLINE=${DEADLINE:-170}
RES=/tmp/call5; rm -rf "$RES" && mkdir -p "$RES"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/gpu.txt"
timeout 100 python3 -c "from vidloader.bench import prepare_dataset as p; p('W1', 'gpu-quick', data_dir='/tmp/bench-data')" > "$OUT/prepare_W1.log" 2>&1
echo "prepared W1 gpu-quick: rc $? at ${SECONDS} s"
bench() {  # workload backend time-limit timed-batches
  local left=$((DEADLINE - SECONDS)) t=$3
  if [ "$left" -lt 20 ]; then echo "[$1] $2 not run: ${left} s left" | tee -a "$OUT/bench.log"; return; fi
  [ "$t" -gt "$left" ] && t=$left
  timeout $((t + 5)) python3 -m vidloader.bench run --scale gpu-quick --dataset W1 \
    --data-dir /tmp/bench-data --out "$RES/$2" --workers 16 --no-plot --batches "$4" \
    --max-seconds 6 --timeout "$t" --workload "$1" --backends "$2" 2>&1 | grep -v "^Svt" >> "$OUT/bench.log"
  grep -E "^\[$1\] $2 \.\.\." "$OUT/bench.log" | tail -1
}
bench random torchcodec-cuda 15 4
bench random pyav-nvdec 50 3
bench random vidloader-nvdec 30 32
bench sequential vidloader-nvdec 30 64
bench sequential pyav-nvdec 40 16
python3 benchmarks/diag/bench_summary.py "$RES" | tee "$OUT/summary.txt"
tar -czf "$OUT/bench.tgz" -C "$RES" .
echo "done at ${SECONDS} s"
