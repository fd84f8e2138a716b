#!/bin/bash
# Written in session 22, NOT YET RUN (no device time left): what session 22 changed or found
# without a GPU to check it, in one call (~9 min, carry .whl; start with the usual pip line):
# (1) the review's CUDA checks of the lean NV12 conversion: no host sync on a side stream
#     (nv12_gpu_check.py) and the lean path against the general one on CUDA (nv12_fuzz.py);
# (2) the stream-order cuda tests (StreamEpoch now keeps three blocks, LRU);
# (3) W3-stream-long in 4 processes, lean conversion, on this card (session 22 measured it on
#     an H100 only: 5,118-5,242 frames/s);
# (4) W3-random in 4 processes with lookahead 4 (the default), 8 and 16 at the gpu scale (the
#     planner's GOP sharing: 8.0 / 5.4 / 3.2 decoded per delivered frame by simulation), and
#     at the gpu-quick scale with the default. Lookahead 16 holds 16 staging buffers
#     of 207 MB per unit decoding in each process: it may not fit an H100.
set -u
export PYTHONUNBUFFERED=1
DEADLINE=${DEADLINE:-560}
RES=/tmp/pending; rm -rf "$RES" && mkdir -p "$RES"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/gpu.txt"
( timeout 200 python3 -c "from vidloader.bench import prepare_dataset as p; p('W3', 'gpu', data_dir='/tmp/bench-data')" > "$OUT/prepare_W3.log" 2>&1
  timeout 120 python3 -c "from vidloader.bench import prepare_dataset as p; p('W3', 'gpu-quick', data_dir='/tmp/bench-data')" >> "$OUT/prepare_W3.log" 2>&1 ) &
P3=$!
timeout 60 python3 benchmarks/diag/nv12_gpu_check.py > "$OUT/nv12_gpu_check.log" 2>&1; tail -12 "$OUT/nv12_gpu_check.log"
timeout 60 python3 benchmarks/diag/nv12_fuzz.py cuda 400 > "$OUT/nv12_fuzz.log" 2>&1; tail -2 "$OUT/nv12_fuzz.log"
VIDLOADER_FAIL_WITHOUT_CUDA=1 timeout 120 python3 -m pytest -q -p no:cacheprovider -m cuda \
  tests/test_loader_nvdec.py tests/test_nvdec_processes.py -k "stream or multicam" 2>&1 | grep -v "^Svt" > "$OUT/cuda_tests.log"
grep -E "^FAILED|^ERROR|passed|failed" "$OUT/cuda_tests.log" | head -6
wait $P3; echo "prepared W3 (gpu, gpu-quick) at ${SECONDS} s"
combo() {  # out-name scale workloads variants
  local left=$((DEADLINE - SECONDS))
  if [ "$left" -lt 50 ]; then echo "$1 not run: ${left} s left"; return; fi
  timeout $(( left < 150 ? left : 150 )) python3 -m vidloader.bench._combo_run --workloads $3 --scale $2 \
    --data-dir /tmp/bench-data --workers 16 --variants $4 --warmup-s 4 --window-s 4 --windows 3 \
    --out $RES/$1.json 2>&1 | grep -v "^Svt" > $RES/$1.log
  grep -E "summary" $RES/$1.log | cut -c1-200
  echo "$1 done at ${SECONDS} s"
}
combo w3long gpu W3-stream-long nvdec-p4
combo w3random gpu W3-random nvdec-p4,nvdec-p4-la8,nvdec-p4-la16
combo w3random-quick gpu-quick W3-random nvdec-p4
python3 benchmarks/diag/combo_summary.py "$RES" | tee "$OUT/summary.txt"
tar -czf "$OUT/results.tgz" -C "$RES" .
echo "done at ${SECONDS} s"
