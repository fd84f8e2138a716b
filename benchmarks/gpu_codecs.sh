#!/bin/bash
# Mixed codecs on the GPU machine (issue 13, items 2-4): GetDecoderCaps, routing, NVDEC planes
# exact against FFmpeg, NVDEC vs CPU RGB at 224x224 (PSNR), one 1080p clip per kind of video.
# Device tool (Python 3.12, torch CUDA, PyAV and PyNvVideoCodec installed into .site):
#   PYTHONPATH=$PWD/src:$PWD/.site bash benchmarks/gpu_codecs.sh            # ~1-2 min
#   PYTHONPATH=$PWD/src:$PWD/.site GPU_TESTS=1 bash benchmarks/gpu_codecs.sh  # + the cuda tests of
#                                                 # the new codecs and the one-look test (~1.5 min more)
# Writes $OUT/gpu_codecs.json, $OUT/gpu_codecs.log (and $OUT/gpu_codecs_tests.log).
set -u
OUT=${OUT:-/tmp/vidloader-gpu-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/gpu_codecs_gpu.txt"
timeout 240 python3 benchmarks/gpu_codecs.py --out "$OUT/gpu_codecs.json" 2>&1 \
  | grep -v "^Svt\[" | tee "$OUT/gpu_codecs.log"
if [ "${GPU_TESTS:-0}" = 1 ]; then
  VIDLOADER_FAIL_WITHOUT_CUDA=1 timeout 200 python3 -m pytest -q -s -p no:cacheprovider tests/test_nvdec.py \
    -k "caps or new_codecs or refusals or one_look or rgb_within or planes_bit_exact" 2>&1 \
    | tee "$OUT/gpu_codecs_tests.log" | grep -E "\[fact\]| passed| failed|FAILED|skipped"
fi
