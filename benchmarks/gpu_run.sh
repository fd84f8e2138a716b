#!/bin/bash
# One call on the GPU machine: the benchmarks (and, with GPU_TESTS=1, the GPU tests first),
# through `python3 -m vidloader.bench` (the code is in src/vidloader/bench/).
# Every (workload, backend) pair is its own command under its own time limit, writing its own
# JSON under $OUT/bench/<backend>/, so one slow backend cannot cost the others their results.
# Device tool: install .whl into .site, export PYTHONPATH=$PWD/src:$PWD/.site, then
#   bash benchmarks/gpu_run.sh
set -u
OUT=${OUT:-/tmp/vidloader-gpu-out}
mkdir -p "$OUT/bench"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/gpu.txt"
if [ "${GPU_TESTS:-0}" = 1 ]; then
  for t in tests/test_nvdec.py tests/test_loader_nvdec.py; do
    VIDLOADER_FAIL_WITHOUT_CUDA=1 timeout 150 python3 -m pytest -q -p no:cacheprovider "$t" \
      2>&1 | tee -a "$OUT/gpu_tests.log"
  done
fi
SCALE=${BENCH_SCALE:-gpu-quick}
# gpu scale (200 x 3 s 1080p) took 140-170 s to generate on 16 cores; gpu-quick ~45 s.
timeout 240 python3 -c "from vidloader.bench import prepare_dataset as p; p('W1', '$SCALE', data_dir='/tmp/bench-data')" \
  2>&1 | grep -v "generating videos" | tee -a "$OUT/bench.log"
bench() {  # workload backend seconds [max-seconds] [timed batches]
  timeout "$3" python3 -m vidloader.bench run --scale "$SCALE" --dataset W1 --data-dir /tmp/bench-data \
    --out "$OUT/bench/$2" --workers 16 --no-plot --batches "${5:-${BENCH_BATCHES:-30}}" \
    --max-seconds "${4:-${BENCH_MAX_SECONDS:-10}}" --timeout "$3" --workload "$1" --backends "$2" \
    2>&1 | tee -a "$OUT/bench.log"
}
# A VideoLoader run starts 16 spawned workers and CUDA (~30-40 s) before its warm-up of 5
# units: 55 s was too short on the H200 for the NVDEC loader (killed before its JSON).
# BENCH_STEPS picks the groups to run (one device call is at most 10 minutes); sweep and probe
# (loader settings, PyNvVideoCodec facts) run only when named.
# An empty BENCH_STEPS runs no benchmark (GPU_TESTS=1 BENCH_STEPS="" runs the tests alone).
STEPS=${BENCH_STEPS-"sequential random relaxed"}
for step in $STEPS; do
  case $step in
    # Long timed windows (160 batches = 20k frames, ~7 s at the NVDEC ceiling): a window of
    # a few units can be inflated by work done ahead during the warm-up.
    sequential) bench sequential vidloader-nvdec 150 20 160; bench sequential pynvc-threads 40 ;;
    random) bench random vidloader-nvdec 180 40 64; bench random pynvc-simple 45 ;;
    relaxed) bench relaxed vidloader-nvdec 180 30 160 ;;
    cpu) bench random vidloader 60; bench sequential vidloader 50 ;;  # the CPU backend here
    sweep) timeout 540 python3 -m vidloader.bench sweep --scale "$SCALE" --data-dir /tmp/bench-data \
             --out "$OUT/bench/sweep.json" 2>&1 | tee -a "$OUT/bench.log" ;;
    probe) timeout 540 python3 -m vidloader.bench probe --out "$OUT/bench/probe.json" \
             2>&1 | tee -a "$OUT/bench.log" ;;
    *) echo "gpu_run.sh: unknown step '$step' (sequential, random, relaxed, cpu, sweep, probe)" >&2 ;;
  esac
done
# The device tool brings back only a few files per call (run 7 lost three JSONs that way):
# every JSON also travels in one archive.
[ -d "$OUT/bench" ] && tar -czf "$OUT/bench.tgz" -C "$OUT" bench
