#!/bin/bash
# The GPU checks session 6 could not run (its device time ran out), in priority order, for one
# device call of under 10 minutes. From the repository root on the device machine, with the
# wheels installed into .site (see DEVELOPERS / benchmarks/README.md):
#   PYTHONPATH=$PWD/src:$PWD/.site bash benchmarks/gpu_next.sh
# Writes into $OUT: gpu.txt, cuda_tests.log, combo_diag.json/.log, stacks.txt.
set -u
OUT=${OUT:-/tmp/vidloader-gpu-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/gpu.txt"
# 1. The cuda tests added this session (~2-3 min): NVTX ranges and no CUDA context in CPU
#    workers, NVDEC-path faults (same-size replacement), the combo on real NVDEC, the loader.
VIDLOADER_FAIL_WITHOUT_CUDA=1 timeout 240 python3 -m pytest -q -p no:cacheprovider -m cuda \
  tests/test_nvtx.py tests/test_reliability.py tests/test_combo.py tests/test_loader_nvdec.py \
  > "$OUT/cuda_tests.log" 2>&1
tail -3 "$OUT/cuda_tests.log"
# 2. The combo after the row-unit fix: per-batch arrivals of nvdec, combo and cpu (~4 min).
OUT=$OUT timeout 300 python3 benchmarks/diag/combo_diag.py 24 1920 1080 \
  nvdec:30:12,combo:45:15,cpu:90:60 > "$OUT/combo_diag.log" 2>&1
grep -v "^Svt" "$OUT/combo_diag.log" | cut -c1-300 | tail -4
