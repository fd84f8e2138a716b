#!/bin/bash
# Session 18, call 3 (~6 min, carry .imgwhl), issue 15: the GPU image pool in worker
# processes. The image cuda tests (the new IPC pool against the in-process one), then the
# loader with 0 (in-process) to 8 worker processes on 8,000 JPEGs
# (benchmarks/diag/jpeg_workers_sweep.py).
set -u
export PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=$PWD/.site/nvidia/cu13/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt
VIDLOADER_FAIL_WITHOUT_CUDA=1 timeout 150 python3 -m pytest -q -p no:cacheprovider -m cuda \
  tests/test_images.py tests/test_images_workers.py tests/test_images_batched.py 2>&1 \
  | grep -v -i "nvjpeg2k\|nvtiff" > $OUT/cuda_tests.log
grep -E "^FAILED|^ERROR|passed|failed" $OUT/cuda_tests.log | head -20 | cut -c1-400
timeout 380 python3 benchmarks/diag/jpeg_workers_sweep.py 8000 8 0,2,3,4,6,8 2>&1 \
  | grep -v -i "nvjpeg2k\|nvtiff\|^\[" > $OUT/jpeg_workers_sweep.log
grep workers $OUT/jpeg_workers_sweep.log
echo "done at ${SECONDS} s"
