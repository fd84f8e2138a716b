#!/bin/bash
# Session 19, last call (~6 min, carry .imgwhl), issue 15: the image cuda tests after the
# session's changes (float16 products in one group of windows; the worker test reads the
# epoch's pool while it runs), then `vidloader bench images --workload jpeg` (40,000 files:
# 4,000 generated JPEGs, 500×375 q90, each under 10 names) without DALI: vidloader's GPU
# pipeline with its default 2 workers and in one process, Pillow on all cores, nvImageCodec
# and torchvision decode alone, one after another in one process.
set -u
export PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=$PWD/.site/nvidia/cu13/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt
VIDLOADER_FAIL_WITHOUT_CUDA=1 timeout 150 python3 -m pytest -q -p no:cacheprovider -m cuda \
  tests/test_images_workers.py tests/test_images.py tests/test_images_batched.py 2>&1 \
  | grep -v -i "nvjpeg2k\|nvtiff" > $OUT/cuda_tests.log
grep -E "^FAILED|^ERROR|passed|failed" $OUT/cuda_tests.log | head -20 | cut -c1-300
timeout $((570 - SECONDS)) python3 -m vidloader.bench images --workload jpeg --images 4000 --copies 10 \
  --batches 300 --data-dir /tmp/bench-images --out $OUT/images 2>&1 \
  | grep -v -i "nvjpeg2k\|nvtiff\|^\[" > $OUT/bench_images.log
tail -12 $OUT/bench_images.log
echo "done at ${SECONDS} s"
