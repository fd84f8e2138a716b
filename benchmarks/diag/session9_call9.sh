#!/bin/bash
# Session 9, call 9 (the last): every cuda test on the final code (helper's faster epoch plans
# merged, windows packed by one gather); the image bench for the README.
set -u
export LD_LIBRARY_PATH=$PWD/.site/nvidia/cu13/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt
VIDLOADER_FAIL_WITHOUT_CUDA=1 timeout 220 python3 -m pytest -q -p no:cacheprovider -m cuda tests/ 2>&1 | grep -v "^Svt" > $OUT/cuda_tests.log; grep -E "^FAILED|passed|failed" $OUT/cuda_tests.log | head; grep -A6 "left alive" $OUT/cuda_tests.log | cut -c1-300
timeout 170 python3 -m vidloader bench images --workload cifar,jpeg --images 4000 --batches 60 --cpu-batches 40 --out $OUT > $OUT/images.log 2>&1; grep -v -i "nvjpeg2k\|nvtiff\|^\[" $OUT/images.log | tail -12
