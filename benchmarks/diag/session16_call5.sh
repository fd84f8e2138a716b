#!/bin/bash
# Session 16, call 5 (issue 15): the image cuda tests, then the GPU JPEG loader with its files
# opened ahead on a reader thread (OPEN_AHEAD) against opened by its lanes, alternated
# (benchmarks/diag/jpeg_open_ahead_ab.py). ~2 min, carry .imgwhl (install into .site).
set -u
export PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=$PWD/.site/nvidia/cu13/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt
VIDLOADER_FAIL_WITHOUT_CUDA=1 timeout 100 python3 -m pytest -q -p no:cacheprovider -m cuda tests/test_images.py \
  tests/test_images_batched.py 2>&1 | grep -v -i "nvjpeg2k\|nvtiff" > $OUT/cuda_tests.log
grep -E "^FAILED|^ERROR|passed|failed" $OUT/cuda_tests.log | head -10 | cut -c1-400
timeout 150 python3 benchmarks/diag/jpeg_open_ahead_ab.py 4000 60 2>&1 | grep -v -i "nvjpeg2k\|nvtiff\|^\[" > $OUT/jpeg_open_ahead_ab.log; tail -10 $OUT/jpeg_open_ahead_ab.log
