#!/bin/bash
# The combo after its dealing change (NVDEC the oldest units, CPU workers the newest beyond
# NVDEC's horizon), against NVDEC alone and CPU alone in one process run, plus its cuda test.
#   PYTHONPATH=$PWD/src:$PWD/.site bash benchmarks/gpu_call_combo.sh     # about 5 minutes
set -u
OUT=${OUT:-/tmp/vidloader-gpu-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/gpu.txt"
VIDLOADER_FAIL_WITHOUT_CUDA=1 timeout 90 python3 -m pytest -q -p no:cacheprovider -m cuda \
  tests/test_combo.py 2>&1 | grep -v "^Svt" > "$OUT/cuda_tests.log"
tail -1 "$OUT/cuda_tests.log"
OUT=$OUT timeout 300 python3 benchmarks/diag/combo_diag.py 24 1920 1080 \
  nvdec:22:8,combo:40:12,combo-div=8:40:12,cpu:50:25 2>&1 | grep -v "^Svt" > "$OUT/combo_diag.log"
cut -c1-300 "$OUT/combo_diag.log" | tail -5
