#!/bin/bash
# Session 22, call 4 (~4 min, carry .whl), issue 16 item 3: the lean NV12 → RGB conversion of
# pictures kept at their size (processing/_nv12.py, _unscaled_8bit; call 3 had the GPU 98% busy
# on W3-stream-long in 4 processes with NVDEC at 54%):
# (1) the NVDEC cuda tests (every frame against a full CPU decode, with the new conversion);
# (2) W3-stream-long in 4 processes with the new conversion, then with the general path
#     (VIDLOADER_LEAN_NV12=0, which the NVDEC worker processes inherit); one process, new.
set -u
export PYTHONUNBUFFERED=1
DEADLINE=${DEADLINE:-245}
RES=/tmp/s22c4; rm -rf "$RES" && mkdir -p "$RES"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/gpu.txt"
timeout 200 python3 -c "from vidloader.bench import prepare_dataset as p; p('W3', 'gpu', data_dir='/tmp/bench-data')" > "$OUT/prepare_W3.log" 2>&1 &
P3=$!
VIDLOADER_FAIL_WITHOUT_CUDA=1 timeout 110 python3 -m pytest -q -p no:cacheprovider -m cuda -x \
  tests/test_nvdec.py tests/test_loader_nvdec.py 2>&1 | grep -v "^Svt" > "$OUT/cuda_tests.log"
grep -E "^FAILED|^ERROR|passed|failed" "$OUT/cuda_tests.log" | head -12
wait $P3; echo "prepared W3: rc $? at ${SECONDS} s"
combo() {  # out-name lean(1/0) variants
  local left=$((DEADLINE - SECONDS))
  if [ "$left" -lt 30 ]; then echo "$1 not run: ${left} s left"; return; fi
  VIDLOADER_LEAN_NV12=$2 timeout $(( left < 70 ? left : 70 )) python3 -m vidloader.bench._combo_run \
    --workloads W3-stream-long --scale gpu --data-dir /tmp/bench-data --workers 16 --variants $3 \
    --warmup-s 4 --window-s 4 --windows 3 --out $RES/$1.json 2>&1 | grep -v "^Svt" > $RES/$1.log
  grep -E "summary" $RES/$1.log | cut -c1-200
  echo "$1 done at ${SECONDS} s"
}
combo p4-lean 1 nvdec-p4
combo p4-general 0 nvdec-p4
combo p1-lean 1 nvdec
python3 benchmarks/diag/combo_summary.py "$RES" | tee "$OUT/summary.txt"
tar -czf "$OUT/results.tgz" -C "$RES" .
echo "done at ${SECONDS} s"
