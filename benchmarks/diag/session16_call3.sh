#!/bin/bash
# Session 16, call 3 (issue 15): the image cuda tests (image workers now come from the "torch"
# fork server, session 15), then: is it the files? vidloader's nvImageCodec decoder fed bytes
# read beforehand against paths (the loader's way), one and two threads, then the loader
# (benchmarks/diag/jpeg_paths_probe.py). ~3 min, carry .imgwhl (nvImageCodec and
# nvJPEG wheels; install them into .site; no PyAV needed).
set -u
export PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=$PWD/.site/nvidia/cu13/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt
VIDLOADER_FAIL_WITHOUT_CUDA=1 timeout 120 python3 -m pytest -q -p no:cacheprovider -m cuda tests/test_images.py \
  tests/test_images_batched.py 2>&1 | grep -v -i "nvjpeg2k\|nvtiff" > $OUT/cuda_tests.log
grep -E "^FAILED|^ERROR|passed|failed" $OUT/cuda_tests.log | head -10 | cut -c1-400
timeout 200 python3 benchmarks/diag/jpeg_paths_probe.py 4000 4 2>&1 | grep -v -i "nvjpeg2k\|nvtiff\|^\[" > $OUT/jpeg_paths_probe.log; tail -12 $OUT/jpeg_paths_probe.log
