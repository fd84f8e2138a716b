#!/bin/bash
# The first device call of the next session (about 9 minutes on one H100 or H200), from what
# session 9 left open:
#   1. every cuda test (the GPU-fault tests passed 7/7 on the H100 after session 9's fix,
#      session9-13; the whole cuda suite last ran before it, session9-9: 53 passed, 1 failed);
#   2. the combo on W4 clips with its parts in one call (issue 13: 0.35-0.60 of the sum);
#   3. where the NVDEC loader's GPU memory goes (issue 16: 8.25 GiB on nvidia-smi at W1,
#      68 staging slots 1.22 GiB, decoded-frame copies made twice ~1.5 GiB at peak);
#   4. W1 sequential against the raw NVDEC ceiling (issue 16: 0.84 in session 8).
# From the repository root on the device, with PyAV and PyNvVideoCodec installed into .site:
#   PYTHONPATH=$PWD/src:$PWD/.site bash benchmarks/gpu_next.sh
# Writes into $OUT: gpu.txt, cuda_tests.log, combo_w4.json/.log, gpu_memory.json/.log,
# seq.log and bench/.
set -u
OUT=${OUT:-/tmp/vidloader-gpu-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/gpu.txt"
VIDLOADER_FAIL_WITHOUT_CUDA=1 timeout 200 python3 -m pytest -q -p no:cacheprovider -m cuda tests/ \
  2>&1 | grep -v "^Svt" > "$OUT/cuda_tests.log"
grep -E "^FAILED|passed|failed" "$OUT/cuda_tests.log" | head
timeout 200 python3 -m vidloader.bench._combo_run --workloads W4-clips --scale gpu-quick \
  --variants cpu,nvdec,combo --warmup-s 6 --out "$OUT/combo_w4.json" 2>&1 | grep -v "^Svt" > "$OUT/combo_w4.log"
grep -E "over|frames_per_s" "$OUT/combo_w4.log" | cut -c1-200
BENCH_STEPS=sequential OUT=$OUT timeout 190 bash benchmarks/gpu_run.sh > "$OUT/seq.log" 2>&1
grep -E "\] (vidloader-nvdec|pynvc-threads)" "$OUT/seq.log"
timeout 100 python3 benchmarks/diag/gpu_memory_probe.py 60 2>&1 | grep -v "^Svt" > "$OUT/gpu_memory.log"
head -30 "$OUT/gpu_memory.log" | cut -c1-160
