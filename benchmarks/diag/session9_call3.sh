#!/bin/bash
# Session 9, call 3: every cuda test (block-computed epoch plans, nested-tensor packing of
# image windows); CIFAR with block-computed plans; the image bench (CIFAR and JPEG) and the
# JPEG pipeline's stages with 1, 2, 4 and 8 reader threads. nvImageCodec and nvJPEG in .site.
set -u
export LD_LIBRARY_PATH=$PWD/.site/nvidia/cu13/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt
VIDLOADER_FAIL_WITHOUT_CUDA=1 timeout 200 python3 -m pytest -q -p no:cacheprovider -m cuda tests/ 2>&1 | grep -v "^Svt" > $OUT/cuda_tests.log; grep -E "^FAILED|^E  |passed|failed" $OUT/cuda_tests.log | head -20 | cut -c1-1500
timeout 150 python3 -m vidloader bench images --workload cifar,jpeg --images 6000 --batches 40 --cpu-batches 10 --out $OUT > $OUT/images.log 2>&1; grep -v -i "nvjpeg2k\|nvtiff\|^\[" $OUT/images.log | tail -12
timeout 150 python3 benchmarks/diag/jpeg_stages.py 6000 24 2>&1 | grep -v -i "nvjpeg2k\|nvtiff" > $OUT/jpeg_stages.log; tail -30 $OUT/jpeg_stages.log
