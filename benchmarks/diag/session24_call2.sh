#!/bin/bash
# Session 24, call 2 (~560 s, carry .whl): (1) session 23's call 5 (PyAV with NVDEC beside
# vidloader-nvdec on W1 gpu-quick in ONE call, random and sequential, and the torchcodec-cuda
# row); (2) only if the card is an H200: W3 at the gpu-quick scale in 4 NVDEC
# processes with the defaults (stream order, random order), the targets issue 16 sets "on one
# H200" (session 23 met them on an H100).
set -u
export PYTHONUNBUFFERED=1
GPU=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -1)
echo "$GPU" > "$OUT/gpu.txt"; echo "$GPU"
RES=/tmp/call2; rm -rf "$RES" && mkdir -p "$RES"
case "$GPU" in *H200*) H200=1 ;; *) H200=0 ;; esac
if [ $H200 = 1 ]; then
  # before the benches, so that no encoding competes with them for the CPU (~30 s)
  timeout 120 python3 -c "from vidloader.bench import prepare_dataset as p; p('W3', 'gpu-quick', data_dir='/tmp/bench-data')" > "$OUT/prepare_W3.log" 2>&1
  echo "W3 prepared: rc $? at ${SECONDS} s"
fi
DEADLINE=170 bash benchmarks/diag/session23_call5.sh
DEADLINE=575
run() {  # scale workload variant
  local left=$((DEADLINE - SECONDS))
  if [ "$left" -lt 45 ]; then echo "$2 $3 not run: ${left} s left"; return; fi
  timeout $(( left < 90 ? left : 90 )) python3 -m vidloader.bench._combo_run --workloads $2 --scale $1 \
    --data-dir /tmp/bench-data --workers 16 --variants $3 --warmup-s 4 --window-s 4 --windows 3 \
    --out $RES/$2-$3-$SECONDS.json 2>&1 | grep -v "^Svt" > $RES/$2-$3-$SECONDS.log
  grep -hE "summary" $RES/$2-$3-*.log | tail -1 | cut -c1-160
}
if [ $H200 = 1 ]; then
  run gpu-quick W3-stream-long nvdec-p4
  run gpu-quick W3-random nvdec-p4
  python3 benchmarks/diag/combo_summary.py "$RES" | tee "$OUT/summary_W3.txt"
  tar -czf "$OUT/w3.tgz" -C "$RES" .
else
  echo "not an H200: W3 not run"
fi
echo "call done at ${SECONDS} s"
