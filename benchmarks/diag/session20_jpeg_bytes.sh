#!/bin/bash
# Session 20, call 5 (~5 min, carry .imgwhl and .variants/paths: src/vidloader before the
# change), issue 15: GPU image workers now read their batch's files and hand nvImageCodec the
# bytes (WORKERS_READ_BYTES), which call 1 measured +14% with 2 workers as a patched copy.
# The image cuda tests, then the GPU JPEG loader (224^2 random resized crop + flip +
# normalize, batch 256) with 2 workers (the default), "bytes" (src) against "paths" (before),
# alternated twice, through jpeg_budget_probe.py.
set -u
export PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=$PWD/.site/nvidia/cu13/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt
VIDLOADER_FAIL_WITHOUT_CUDA=1 timeout 150 python3 -m pytest -q -p no:cacheprovider -m cuda \
  tests/test_images_batched.py tests/test_images_workers.py tests/test_images.py 2>&1 \
  | grep -v -i "nvjpeg2k\|nvtiff" > $OUT/cuda_tests.log
grep -E "^FAILED|^ERROR|passed|failed" $OUT/cuda_tests.log | head -20 | cut -c1-300
timeout $((380 - SECONDS)) python3 benchmarks/diag/jpeg_budget_probe.py 8000 6 --no-stages --no-mps \
  --loaders "bytes:src:2;paths:.variants/paths:2;bytes:src:2;paths:.variants/paths:2" 2>&1 \
  | grep -v -i "nvjpeg2k\|nvtiff\|^\[" > $OUT/jpeg_budget_probe.log
cut -c1-420 $OUT/jpeg_budget_probe.log
echo "done at ${SECONDS} s"
