#!/bin/bash
# Session 9, call 8: the image cuda tests with windows packed by one gather; the image bench;
# the JPEG loader with each packing (gather, copies, nested) in one call, and their host ops.
set -u
export LD_LIBRARY_PATH=$PWD/.site/nvidia/cu13/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt
VIDLOADER_FAIL_WITHOUT_CUDA=1 timeout 100 python3 -m pytest -q -p no:cacheprovider -m cuda tests/test_images.py tests/test_images_batched.py 2>&1 | grep -v "^Svt" > $OUT/cuda_tests.log; grep -E "^FAILED|^E  |passed|failed" $OUT/cuda_tests.log | head -10 | cut -c1-400
timeout 150 python3 benchmarks/diag/jpeg_stages.py 4000 24 2>&1 | grep -v -i "nvjpeg2k\|nvtiff" > $OUT/jpeg_stages.log; grep -E "augment|loader|ms per call" $OUT/jpeg_stages.log
timeout 150 python3 -m vidloader bench images --workload cifar,jpeg --images 4000 --batches 60 --cpu-batches 40 --out $OUT > $OUT/images.log 2>&1; grep -v -i "nvjpeg2k\|nvtiff\|^\[" $OUT/images.log | tail -12
timeout 80 python3 benchmarks/diag/augment_profile.py 2>&1 | grep -v -i "nvjpeg2k\|nvtiff" > $OUT/augment_profile.log; grep -E "^==|Self CPU time total|cudaLaunchKernel" $OUT/augment_profile.log
