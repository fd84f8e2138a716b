#!/bin/bash
# Session 9, call 5: the image cuda tests with windows packed through a nested tensor; the
# image bench (CIFAR with 40 reference batches, JPEG); the augmentation's host ops profiled.
set -u
export LD_LIBRARY_PATH=$PWD/.site/nvidia/cu13/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt
VIDLOADER_FAIL_WITHOUT_CUDA=1 timeout 100 python3 -m pytest -q -p no:cacheprovider -m cuda tests/test_images.py tests/test_images_batched.py 2>&1 | grep -v "^Svt" > $OUT/cuda_tests.log; grep -E "^FAILED|^E  |passed|failed" $OUT/cuda_tests.log | head -20 | cut -c1-600
timeout 150 python3 -m vidloader bench images --workload cifar,jpeg --images 6000 --batches 60 --cpu-batches 40 --out $OUT > $OUT/images.log 2>&1; grep -v -i "nvjpeg2k\|nvtiff\|^\[" $OUT/images.log | tail -12
timeout 90 python3 benchmarks/diag/augment_profile.py 2>&1 | grep -v -i "nvjpeg2k\|nvtiff" > $OUT/augment_profile.log; grep -E "^==|Self CPU time total" $OUT/augment_profile.log
