#!/bin/bash
# Session 19 (~3 min, carry .imgwhl), issue 15: nvImageCodec's decode alone (one process) with
# the hardware decoder's preallocation options, 4 CUDA streams, batches of 1024, 2 threads,
# beside nvidia-smi dmon's JPEG-engine share (benchmarks/diag/jpeg_hw_options_probe.py).
set -u
export PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=$PWD/.site/nvidia/cu13/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt
cd benchmarks/diag && timeout 300 python3 jpeg_hw_options_probe.py 5 2>&1 \
  | grep -v -i "nvjpeg2k\|nvtiff\|^\[" > $OUT/jpeg_hw_options_probe.log
cut -c1-300 $OUT/jpeg_hw_options_probe.log
echo "done at ${SECONDS} s"
