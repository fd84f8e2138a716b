#!/bin/bash
# Session 19 (~6 min, carry .imgwhl and .variants), issue 15: the GPU JPEG pool split by stage
# (pipeline/_image_split_workers.py: one decoding process of 2 threads, K augmenting
# processes; the new default) against whole batches per worker ("unsplit", session 18's pool).
# The image cuda tests first (both pools against the in-process one), then the loader with
# K = 1-4 split and 2, 4 unsplit, with CPU and nvidia-smi dmon shares.
set -u
export PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=$PWD/.site/nvidia/cu13/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt
VIDLOADER_FAIL_WITHOUT_CUDA=1 timeout 150 python3 -m pytest -q -p no:cacheprovider -m cuda \
  tests/test_images_workers.py tests/test_images.py tests/test_images_batched.py 2>&1 \
  | grep -v -i "nvjpeg2k\|nvtiff" > $OUT/cuda_tests.log
grep -E "^FAILED|^ERROR|passed|failed" $OUT/cuda_tests.log | head -20 | cut -c1-300
timeout $((580 - SECONDS)) python3 benchmarks/diag/jpeg_budget_probe.py 8000 6 --no-stages --no-mps \
  --loaders "split:src:2,4;unsplit:.variants/unsplit:2,4;split:src:1,3" 2>&1 \
  | grep -v -i "nvjpeg2k\|nvtiff\|^\[" > $OUT/jpeg_budget_probe.log
cut -c1-420 $OUT/jpeg_budget_probe.log
echo "done at ${SECONDS} s"
