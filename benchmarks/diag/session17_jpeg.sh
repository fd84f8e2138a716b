#!/bin/bash
# Session 17, call 8 (~3 min, carry .imgwhl only: nvImageCodec and nvJPEG wheels; no PyAV
# needed), issue 15: what slows nvImageCodec's decode inside the GPU JPEG loader
# (benchmarks/diag/jpeg_contention_probe.py: the same decode alone and beside a GIL holder,
# GPU kernels on another stream, busy CPU threads, the loader's augmentation).
set -u
export PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=$PWD/.site/nvidia/cu13/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt
timeout 300 python3 benchmarks/diag/jpeg_contention_probe.py 4000 4 2>&1 \
  | grep -v -i "nvjpeg2k\|nvtiff\|^\[" > $OUT/jpeg_contention_probe.log
tail -12 $OUT/jpeg_contention_probe.log
echo "done at ${SECONDS} s"
