#!/bin/bash
# Session 19 (~7 min, carry .imgwhl and .variants: patched copies of src/vidloader), issue 15:
# the image cuda tests (float16 products, the worker pool), then the GPU JPEG loader with K
# worker processes for the code as it is ("after": float16 products, worker threads sleep on
# GPU waits, decoders share the cores) and with one change undone at a time ("no-sleep",
# "no-share", "neither"), and "bytes" (files read in Python and decoded from memory).
set -u
export PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=$PWD/.site/nvidia/cu13/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt
VIDLOADER_FAIL_WITHOUT_CUDA=1 timeout 150 python3 -m pytest -q -p no:cacheprovider -m cuda \
  tests/test_images_batched.py tests/test_images_workers.py tests/test_images.py 2>&1 \
  | grep -v -i "nvjpeg2k\|nvtiff" > $OUT/cuda_tests.log
grep -E "^FAILED|^ERROR|passed|failed" $OUT/cuda_tests.log | head -20 | cut -c1-300
timeout $((580 - SECONDS)) python3 benchmarks/diag/jpeg_budget_probe.py 8000 6 --no-stages --no-mps \
  --loaders "after:src:2,4;no-sleep:.variants/no-sleep:2,4;no-share:.variants/no-share:2,4;neither:.variants/neither:2,4;bytes:.variants/bytes:2,4;after:src:0,8,6,3" 2>&1 \
  | grep -v -i "nvjpeg2k\|nvtiff\|^\[" > $OUT/jpeg_budget_probe.log
cut -c1-420 $OUT/jpeg_budget_probe.log
echo "done at ${SECONDS} s"
