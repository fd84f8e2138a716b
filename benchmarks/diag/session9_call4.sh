#!/bin/bash
# Session 9, call 4: the image and GPU-fault cuda tests; the image bench (CIFAR with a longer
# reference run, JPEG with nvImageCodec opening its files); the JPEG stages with both ways of
# packing windows and with Python reads against nvImageCodec's. nvImageCodec, nvJPEG in .site.
set -u
export LD_LIBRARY_PATH=$PWD/.site/nvidia/cu13/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt
VIDLOADER_FAIL_WITHOUT_CUDA=1 timeout 120 python3 -m pytest -q -p no:cacheprovider -m cuda tests/test_images.py tests/test_images_batched.py tests/test_nvdec_gpu_faults.py 2>&1 | grep -v "^Svt" > $OUT/cuda_tests.log; grep -E "^FAILED|^E  |passed|failed" $OUT/cuda_tests.log | head -20 | cut -c1-3000
timeout 150 python3 -m vidloader bench images --workload cifar,jpeg --images 6000 --batches 40 --cpu-batches 40 --out $OUT > $OUT/images.log 2>&1; grep -v -i "nvjpeg2k\|nvtiff\|^\[" $OUT/images.log | tail -12
timeout 150 python3 benchmarks/diag/jpeg_stages.py 6000 24 2>&1 | grep -v -i "nvjpeg2k\|nvtiff" > $OUT/jpeg_stages.log; tail -26 $OUT/jpeg_stages.log
