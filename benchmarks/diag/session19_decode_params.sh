#!/bin/bash
# Session 19 (~2 min, carry .imgwhl), issue 15: which of vidloader's decode parameters (EXIF
# orientation, sRGB) costs the 25% between nvImageCodec's defaults and vidloader's decoder on
# the same bytes (session19-8): two decode threads each way
# (benchmarks/diag/jpeg_hw_options_probe.py --steps --params).
set -u
export PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=$PWD/.site/nvidia/cu13/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt
(cd benchmarks/diag && timeout 200 python3 jpeg_hw_options_probe.py 5 --steps --params 2>&1 \
  | grep -v -i "nvjpeg2k\|nvtiff\|^\[" > $OUT/jpeg_decode_steps.log)
cut -c1-300 $OUT/jpeg_decode_steps.log
echo "done at ${SECONDS} s"
