#!/bin/bash
# One device call (under 10 minutes) of session 7: the cuda tests of the combo, the images and
# the NVDEC picture-size check; the combo (CPU decoders niced, NVDEC fed by demux workers, two
# splits of the workers) against NVDEC alone and CPU alone in one process run (issue 13); the
# image benchmark with nvImageCodec (issue 15); the mixed-codec split if time is left.
# On the device, with PyAV, PyNvVideoCodec, nvImageCodec and nvJPEG installed into .site:
#   PYTHONPATH=$PWD/src:$PWD/.site bash benchmarks/gpu_call_combo_images.sh
# Writes into $OUT: gpu.txt, cuda_tests.log, combo_diag.json/.log, images.log, images-*.json,
# gpu_codecs.json/.log.
set -u
OUT=${OUT:-/tmp/vidloader-gpu-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/gpu.txt"
VIDLOADER_FAIL_WITHOUT_CUDA=1 timeout 120 python3 -m pytest -q -s -p no:cacheprovider -m cuda \
  tests/test_combo.py tests/test_reliability.py tests/test_images.py tests/test_images_batched.py \
  2>&1 | grep -v "^Svt" > "$OUT/cuda_tests.log"
tail -3 "$OUT/cuda_tests.log"
OUT=$OUT timeout 280 python3 benchmarks/diag/combo_diag.py 24 1920 1080 \
  nvdec:22:8,combo:34:10,combo-div=8:34:10,cpu:50:25 2>&1 | grep -v "^Svt" > "$OUT/combo_diag.log"
cut -c1-260 "$OUT/combo_diag.log" | tail -5
timeout 130 python3 -m vidloader bench images --workload cifar,jpeg --images 3000 --batches 30 \
  --cpu-batches 10 --out "$OUT" > "$OUT/images.log" 2>&1
tail -22 "$OUT/images.log"
OUT=$OUT timeout 50 bash benchmarks/gpu_codecs.sh > /dev/null 2>&1
tail -12 "$OUT/gpu_codecs.log"
