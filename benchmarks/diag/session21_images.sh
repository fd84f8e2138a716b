#!/bin/bash
# Session 21, call 5 (~5 min, carry .imgwhl; .site from call 4 and DALI in $HOME/dalisite on
# the same warm machine), issue 15: (1) the image cuda tests, among them
# test_nvimgcodec_within_tolerance_of_pillow, which since session 20 expects the truncated
# JPEG skipped on the GPU path as on the CPU path (not yet run on a GPU); (2) `vidloader bench
# images --workload jpeg` on 40,000 files (4,000 generated 500×375 JPEGs under 10 names), with
# DALI's whole pipeline in the same call.
set -u
export PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=$PWD/.site/nvidia/cu13/lib:${LD_LIBRARY_PATH:-}
export PYTHONPATH=$PYTHONPATH:$HOME/dalisite
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt
VIDLOADER_FAIL_WITHOUT_CUDA=1 timeout 150 python3 -m pytest -q -p no:cacheprovider -m cuda \
  tests/test_images_batched.py tests/test_images_workers.py tests/test_images.py 2>&1 | grep -v -i "nvjpeg2k\|nvtiff" > "$OUT/cuda_tests.log"
grep -E "^FAILED|^ERROR|passed|failed" "$OUT/cuda_tests.log" | head -12
timeout $(( 560 - SECONDS )) python3 -m vidloader.bench images --workload jpeg --images 4000 --copies 10 \
  --batches 300 --data-dir /tmp/bench-images --out $OUT/images 2>&1 \
  | grep -v -i "nvjpeg2k\|nvtiff\|^\[" > $OUT/bench_images.log
tail -14 $OUT/bench_images.log
echo "done at ${SECONDS} s"
