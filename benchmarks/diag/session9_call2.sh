#!/bin/bash
# Session 9, call 2: the image and GPU-fault cuda tests; CIFAR with in-memory units driven
# without the scheduler (issue 15); the JPEG pipeline's stages, warmed up, and its threads
# clocked inside the loader. nvImageCodec and nvJPEG installed into .site.
set -u
export LD_LIBRARY_PATH=$PWD/.site/nvidia/cu13/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt
VIDLOADER_FAIL_WITHOUT_CUDA=1 timeout 150 python3 -m pytest -q -p no:cacheprovider -m cuda tests/test_images.py tests/test_images_batched.py tests/test_nvdec_gpu_faults.py 2>&1 | grep -v "^Svt" > $OUT/cuda_tests.log; grep -E "^FAILED|^E  |passed|failed" $OUT/cuda_tests.log | head -20 | cut -c1-600
timeout 100 python3 -m vidloader bench images --workload cifar --cpu-batches 10 --out $OUT > $OUT/images.log 2>&1; grep -v -i "nvjpeg2k\|nvtiff\|^\[" $OUT/images.log | tail -5
timeout 150 python3 benchmarks/diag/jpeg_stages.py 6000 20 2>&1 | grep -v -i "nvjpeg2k\|nvtiff" > $OUT/jpeg_stages.log; tail -22 $OUT/jpeg_stages.log
