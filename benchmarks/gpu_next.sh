#!/bin/bash
# The first device call of the next session (about 8 minutes on one H100 or H200), from what
# session 8 left open:
#   1. every cuda test;
#   2. the combo on W4 clips with its parts in one call (issue 13: 0.35-0.60 of the sum in
#      session 8, delivered in bursts; combo_cpu_idle_s says why the CPU side idled);
#   3. W1 sequential against the raw NVDEC ceiling (issue 16: 0.84 on the H100 in session 8).
# From the repository root on the device, with PyAV and PyNvVideoCodec installed into .site:
#   PYTHONPATH=$PWD/src:$PWD/.site bash benchmarks/gpu_next.sh
# Writes into $OUT: gpu.txt, cuda_tests.log, combo_w4.json/.log, seq.log and bench/.
set -u
OUT=${OUT:-/tmp/vidloader-gpu-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/gpu.txt"
VIDLOADER_FAIL_WITHOUT_CUDA=1 timeout 240 python3 -m pytest -q -p no:cacheprovider -m cuda tests/ \
  2>&1 | grep -v "^Svt" > "$OUT/cuda_tests.log"
tail -3 "$OUT/cuda_tests.log"
timeout 200 python3 -m vidloader.bench._combo_run --workloads W4-clips --scale gpu-quick \
  --variants cpu,nvdec,combo --warmup-s 6 --out "$OUT/combo_w4.json" 2>&1 | grep -v "^Svt" > "$OUT/combo_w4.log"
grep -E "over|frames_per_s" "$OUT/combo_w4.log" | cut -c1-200
BENCH_STEPS=sequential OUT=$OUT timeout 190 bash benchmarks/gpu_run.sh > "$OUT/seq.log" 2>&1
grep -E "\] (vidloader-nvdec|pynvc-threads)" "$OUT/seq.log"
