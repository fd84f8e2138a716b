#!/bin/bash
# Session 19, call 1 (~6 min, carry .imgwhl and .before: the source at HEAD before the
# float16 resize), issue 15: where the GPU JPEG pipeline's budget goes
# (benchmarks/diag/jpeg_budget_probe.py): the augmentation's host and GPU time in float32 and
# float16, the decode alone and beside it, the loader with 0-8 worker processes before and
# after, with CPU and nvidia-smi dmon shares, and under MPS if the machine has it.
set -u
export PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=$PWD/.site/nvidia/cu13/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt
which nvidia-cuda-mps-control nsys >> $OUT/gpu.txt 2>&1
timeout 540 python3 benchmarks/diag/jpeg_budget_probe.py 8000 6 2>&1 \
  | grep -v -i "nvjpeg2k\|nvtiff\|^\[" > $OUT/jpeg_budget_probe.log
cat $OUT/jpeg_budget_probe.log | cut -c1-600
echo "done at ${SECONDS} s"
