#!/bin/bash
# Session 24, call 5 (issue 15; ~200 s, carry .imgwhl; LD_LIBRARY_PATH set below): the
# in-process GPU JPEG pool (num_workers=0, 2 lanes) with the lanes decoding in phases
# (PHASED_DECODE: the index's cut_short flags instead of reading each file's ends, images
# wrapped as tensors on the augmentation thread) against as before, alternated three times,
# 150 batches of 256 each; then the default 2 GPU workers once, and nvImageCodec's decode
# alone once, for reference. Also the image cuda tests.
set -u
export PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=$PWD/.site/nvidia/cu13/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/gpu.txt"
VIDLOADER_FAIL_WITHOUT_CUDA=1 timeout 90 python3 -m pytest -q -p no:cacheprovider -m cuda \
  tests/test_images.py 2>&1 | grep -v -i "nvjpeg2k\|nvtiff" | tail -3 > "$OUT/cuda_tests.log"; cat "$OUT/cuda_tests.log"
ab() {  # label phased workers references
  mkdir -p "$OUT/$1"
  AB_ONLY="2 lanes, whole images" AB_PHASED=$2 AB_WORKERS=$3 AB_REFERENCES=$4 OUT="$OUT/$1" \
    timeout 80 python3 benchmarks/diag/jpeg_loader_ab.py 4000 150 2>&1 \
    | grep -E "images/s|Error" | sed "s/^/$1 (phased $2, workers $3): /" | tee -a "$OUT/summary.txt"
}
for round in 1 2 3; do
  ab "r$round-before" 0 0 0
  ab "r$round-phased" 1 0 0
done
ab "workers2" 1 2 1
echo "done at ${SECONDS} s"
