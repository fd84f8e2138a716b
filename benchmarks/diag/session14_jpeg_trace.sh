#!/bin/bash
# Next session's JPEG call (issue 15), ready to run (~2 min): torch-profiler traces of the GPU
# JPEG loader and of the same decode alone (benchmarks/diag/jpeg_trace.py), to see what the
# loader's decode calls wait on; the image cuda tests first (the pool after session 13's
# review mends has not run on a GPU). Carry .imgwhl (nvImageCodec 0.9 + nvJPEG 13 wheels).
set -u
export LD_LIBRARY_PATH=$PWD/.site/nvidia/cu13/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt
VIDLOADER_FAIL_WITHOUT_CUDA=1 timeout 120 python3 -m pytest -q -p no:cacheprovider -m cuda tests/test_images.py tests/test_images_batched.py 2>&1 | grep -v -i "nvjpeg2k\|nvtiff" > $OUT/cuda_tests.log; grep -E "^FAILED|^E  |passed|failed" $OUT/cuda_tests.log | head -10 | cut -c1-400
timeout 300 python3 benchmarks/diag/jpeg_trace.py 4000 12 2>&1 | grep -v -i "nvjpeg2k\|nvtiff\|^\[" > $OUT/jpeg_trace.log; cat $OUT/jpeg_trace.log | tail -60
