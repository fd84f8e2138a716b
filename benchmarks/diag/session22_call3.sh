#!/bin/bash
# Session 22, call 3 (~6 min, carry .whl), issue 16 item 3 after the stream plan's fix
# (StreamEpoch computes a block of batches in one pass; call 2's W3-stream-long gave 212
# frames/s with the loader's main thread in the in-order epoch's block computations):
# (1) the NVDEC loader's cuda tests of the stream order (the plan's change, on the GPU);
# (2) W3-stream-long (the rigs listed 20 times: no window spans an epoch's restart) in 1, 4 and
#     8 processes; (3) W3-random in 1 and 4 processes (target >= 1,000 frames/s).
set -u
export PYTHONUNBUFFERED=1
DEADLINE=${DEADLINE:-470}
RES=/tmp/s22c3; rm -rf "$RES" && mkdir -p "$RES"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/gpu.txt"
timeout 300 python3 -c "from vidloader.bench import prepare_dataset as p; p('W3', 'gpu', data_dir='/tmp/bench-data')" > "$OUT/prepare_W3.log" 2>&1 &
P3=$!
VIDLOADER_FAIL_WITHOUT_CUDA=1 timeout 150 python3 -m pytest -q -p no:cacheprovider -m cuda \
  tests/test_loader_nvdec.py tests/test_nvdec_processes.py -k "stream or multicam" 2>&1 | grep -v "^Svt" > "$OUT/cuda_tests.log"
grep -E "^FAILED|^ERROR|passed|failed" "$OUT/cuda_tests.log" | head -12
wait $P3; echo "prepared W3: rc $? at ${SECONDS} s"
combo() {  # out-name scale workloads variants window-s
  local left=$((DEADLINE - SECONDS))
  if [ "$left" -lt 45 ]; then echo "$1 not run: ${left} s left"; return; fi
  timeout $(( left < 200 ? left : 200 )) python3 -m vidloader.bench._combo_run --workloads $3 --scale $2 \
    --data-dir /tmp/bench-data --workers 16 --variants $4 --warmup-s 4 --window-s $5 --windows 3 \
    --out $RES/$1.json 2>&1 | grep -v "^Svt" > $RES/$1.log
  grep -E "summary" $RES/$1.log | cut -c1-200
  echo "$1 done at ${SECONDS} s"
}
combo w3long gpu W3-stream-long nvdec,nvdec-p4,nvdec-p8 4
combo w3random gpu W3-random nvdec,nvdec-p4 4
python3 benchmarks/diag/combo_summary.py "$RES" | tee "$OUT/summary.txt"
tar -czf "$OUT/results.tgz" -C "$RES" .
echo "done at ${SECONDS} s"
