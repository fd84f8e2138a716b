#!/bin/bash
# Session 19 (~3 min, carry .imgwhl), issue 15: why the split pool's decoding process (two
# threads) ran at ~7k images/s with the JPEG engines 12% busy (session19-7) where two decode
# threads alone gave 19k at 50% (session19-5): two threads through each step between them
# (benchmarks/diag/jpeg_hw_options_probe.py --steps); then the image workers' cuda tests.
set -u
export PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=$PWD/.site/nvidia/cu13/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt
(cd benchmarks/diag && timeout 200 python3 jpeg_hw_options_probe.py 5 --steps 2>&1 \
  | grep -v -i "nvjpeg2k\|nvtiff\|^\[" > $OUT/jpeg_decode_steps.log)
cut -c1-300 $OUT/jpeg_decode_steps.log
VIDLOADER_FAIL_WITHOUT_CUDA=1 timeout 150 python3 -m pytest -q -p no:cacheprovider -m cuda \
  tests/test_images_workers.py 2>&1 | grep -v -i "nvjpeg2k\|nvtiff" > $OUT/cuda_tests.log
grep -E "^FAILED|^ERROR|passed|failed" $OUT/cuda_tests.log | head -20 | cut -c1-300
echo "done at ${SECONDS} s"
