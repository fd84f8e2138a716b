#!/bin/bash
# Session 13: the GPU JPEG loader rebuilt (decode lanes, augmentation on its own thread,
# crop windows decoded alone): the image cuda tests, then every setting against DALI's whole
# pipeline in one process (benchmarks/diag/jpeg_loader_ab.py). Carry .imgwhl; DALI in
# $HOME/dalisite (put there by the three calls before, on the same warm machine).
set -u
export LD_LIBRARY_PATH=$PWD/.site/nvidia/cu13/lib:${LD_LIBRARY_PATH:-}
export PYTHONPATH=$PYTHONPATH:$HOME/dalisite
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt
VIDLOADER_FAIL_WITHOUT_CUDA=1 timeout 120 python3 -m pytest -q -p no:cacheprovider -m cuda tests/test_images.py tests/test_images_batched.py 2>&1 | grep -v -i "nvjpeg2k\|nvtiff" > $OUT/cuda_tests.log; grep -E "^FAILED|^E  |passed|failed" $OUT/cuda_tests.log | head -10 | cut -c1-400
timeout 300 python3 benchmarks/diag/jpeg_loader_ab.py 4000 60 2>&1 | grep -v -i "nvjpeg2k\|nvtiff\|^\[" > $OUT/jpeg_loader_ab.log; cat $OUT/jpeg_loader_ab.log | tail -14
