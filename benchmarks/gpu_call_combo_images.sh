#!/bin/bash
# One device call (about 9 minutes) for session 7: the cuda tests of the NVDEC picture-size
# check and of the image GPU path, the combo with its CPU side niced (issue 13; two
# nicenesses, against NVDEC alone and CPU alone, in one process run), the image benchmark with
# nvImageCodec (issue 15) and the mixed-codec split (issue 13 items 2-4).
# On the device, with PyAV, PyNvVideoCodec, nvImageCodec and nvJPEG installed into .site:
#   PYTHONPATH=$PWD/src:$PWD/.site bash benchmarks/gpu_call_combo_images.sh
# Writes into $OUT: gpu.txt, cuda_tests.log, combo_diag.json/.log, images.log, images-*.json,
# gpu_codecs.json/.log.
set -u
OUT=${OUT:-/tmp/vidloader-gpu-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/gpu.txt"
VIDLOADER_FAIL_WITHOUT_CUDA=1 timeout 150 python3 -m pytest -q -s -p no:cacheprovider -m cuda \
  tests/test_reliability.py tests/test_images.py tests/test_images_batched.py \
  2>&1 | grep -v "^Svt" > "$OUT/cuda_tests.log"
tail -3 "$OUT/cuda_tests.log"
OUT=$OUT timeout 330 python3 benchmarks/diag/combo_diag.py 24 1920 1080 \
  nvdec:22:8,combo:34:10,combo-nice=19:34:10,cpu:55:25 2>&1 | grep -v "^Svt" > "$OUT/combo_diag.log"
cut -c1-200 "$OUT/combo_diag.log" | tail -5
timeout 150 python3 -m vidloader bench images --workload cifar,jpeg --images 3000 --batches 30 \
  --cpu-batches 10 --out "$OUT" > "$OUT/images.log" 2>&1
tail -25 "$OUT/images.log"
OUT=$OUT timeout 100 bash benchmarks/gpu_codecs.sh > /dev/null 2>&1
tail -15 "$OUT/gpu_codecs.log"
