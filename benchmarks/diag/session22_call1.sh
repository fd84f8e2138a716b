#!/bin/bash
# Session 22, call 1 (~9.5 min, carry .whl and SPDL's wheels), issue 16 items 2, 3 and the SPDL
# comparison, with the surface copy as revised after session 21's review:
# (1) the NVDEC cuda tests (the revised decoding/nvdec/_surface_copy.py was never run on a GPU);
# (2) the raw ceiling (pynvc-threads) on W1 sequential and relaxed, 16 s windows;
# (3) `bench run` W1 sequential, SPDL and vidloader-nvdec (one process, the defaults)
#     alternated twice: the first SPDL-vs-vidloader ratio since the surface copy;
# (4) `_combo_run`, three 8 s windows: W1-sequential in 4 processes and in one, W1-relaxed in 4
#     (item 2: >= 0.97 of raw as the minimum window);
# (5) W3-stream (gpu scale) in 1, 4 and 8 processes, three 4 s windows (item 3: 3,141 at best
#     in session 19, before the surface copy).
set -u
export PYTHONUNBUFFERED=1
DEADLINE=${DEADLINE:-570}
RES=/tmp/s22c1; rm -rf "$RES" && mkdir -p "$RES"
source benchmarks/diag/spdl_env.sh
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/gpu.txt"
( timeout 150 python3 -c "from vidloader.bench import prepare_dataset as p; p('W1', 'gpu-quick', data_dir='/tmp/bench-data')" > "$OUT/prepare_W1.log" 2>&1
  echo "W1 rc $? at ${SECONDS} s"
  timeout 300 python3 -c "from vidloader.bench import prepare_dataset as p; p('W3', 'gpu', data_dir='/tmp/bench-data')" > "$OUT/prepare_W3.log" 2>&1
  echo "W3 rc $? at ${SECONDS} s" ) > "$RES/prepared.txt" &
P1=$!
VIDLOADER_FAIL_WITHOUT_CUDA=1 timeout 170 python3 -c \
  "import sys, pytest, spdl.io.utils as u; u.get_ffmpeg_versions(); sys.exit(pytest.main(sys.argv[1:]))" \
  -q -p no:cacheprovider -m cuda -x tests/test_surface_copy.py tests/test_nvdec.py \
  tests/test_loader_nvdec.py tests/test_memory_budget.py tests/test_nvdec_processes.py \
  2>&1 | grep -v "^Svt" > "$OUT/cuda_tests.log"
grep -E "^FAILED|^ERROR|passed|failed" "$OUT/cuda_tests.log" | head -12
until grep -q "W1 rc" "$RES/prepared.txt" 2>/dev/null; do sleep 2; done
cat "$RES/prepared.txt"
for w in sequential relaxed; do
  timeout 60 python3 -m vidloader.bench run --scale gpu-quick --dataset W1 --data-dir /tmp/bench-data \
    --out "$RES/raw-$w" --workers 16 --no-plot --batches 600 --max-seconds 16 --timeout 50 \
    --workload $w --backends pynvc-threads 2>&1 | grep -E "^\[$w\]" | tail -1
done
bench() {  # run-name dataset workload backend
  local left=$((DEADLINE - SECONDS))
  if [ "$left" -lt 40 ]; then echo "[$3] $4 not run: ${left} s left"; return; fi
  timeout $(( left < 70 ? left : 70 )) python3 -m vidloader.bench run --scale gpu-quick --dataset $2 \
    --data-dir /tmp/bench-data --out "$RES/$1" --workers 16 --no-plot --batches 300 \
    --max-seconds 8 --timeout 60 --workload $3 --backends $4 2>&1 | grep -v "^Svt" >> "$OUT/bench.log"
  echo "[$3] $4 done at ${SECONDS} s"
}
bench seq-spdl-1 W1 sequential spdl
bench seq-vl-1 W1 sequential vidloader-nvdec
bench seq-spdl-2 W1 sequential spdl
bench seq-vl-2 W1 sequential vidloader-nvdec
combo() {  # out-name scale workloads variants window-s
  local left=$((DEADLINE - SECONDS))
  if [ "$left" -lt 60 ]; then echo "$1 not run: ${left} s left"; return; fi
  timeout $(( left < 200 ? left : 200 )) python3 -m vidloader.bench._combo_run --workloads $3 --scale $2 \
    --data-dir /tmp/bench-data --workers 16 --variants $4 --warmup-s 3 --window-s $5 --windows 3 \
    --out $RES/$1.json 2>&1 | grep -v "^Svt" > $RES/$1.log
  grep -E "summary" $RES/$1.log | cut -c1-200
  echo "$1 done at ${SECONDS} s"
}
combo seq gpu-quick W1-sequential nvdec-p4,nvdec 8
combo relaxed gpu-quick W1-relaxed nvdec-p4 8
wait $P1; cat "$RES/prepared.txt"
combo w3 gpu W3-stream nvdec,nvdec-p4,nvdec-p8 4
python3 benchmarks/diag/combo_summary.py "$RES" | tee "$OUT/summary.txt"
python3 benchmarks/diag/bench_summary.py "$RES" 2>&1 | tee -a "$OUT/summary.txt"
tar -czf "$OUT/results.tgz" -C "$RES" .
echo "done at ${SECONDS} s"
