#!/bin/bash
# One call on the GPU machine: GPU tests, then the benchmarks; every log goes into $OUT.
# Device tool: install .whl into .site, export PYTHONPATH=$PWD/src:$PWD/.site, then
#   bash benchmarks/gpu_run.sh
set -u
OUT=${OUT:-/tmp/vidloader-gpu-out}
mkdir -p "$OUT/bench"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/gpu.txt"
# Each test file in its own process under its own limit: a hang cannot eat the call.
for t in tests/test_nvdec.py tests/test_loader_nvdec.py; do
  VIDLOADER_FAIL_WITHOUT_CUDA=1 timeout 150 python3 -m pytest -q -p no:cacheprovider "$t" \
    2>&1 | tee -a "$OUT/gpu_tests.log"
  echo "exit ${PIPESTATUS[0]} for $t" | tee -a "$OUT/gpu_tests.log"
done
bench() {  # workload, backends
  timeout 240 python3 -m vidloader.bench --scale "${BENCH_SCALE:-gpu}" --dataset W1 \
    --data-dir /tmp/bench-data --out "$OUT/bench" --workers 16 --no-plot \
    --batches "${BENCH_BATCHES:-40}" --max-seconds "${BENCH_MAX_SECONDS:-15}" --timeout 200 \
    --workload "$1" --backends "$2" 2>&1 | tee -a "$OUT/bench.log"
}
bench sequential "vidloader-nvdec,pynvc-threads,vidloader"
bench random "vidloader-nvdec,pynvc-simple,vidloader,naive"
bench relaxed "vidloader-nvdec,vidloader"
