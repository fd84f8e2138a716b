#!/bin/bash
# Session 19 (~5 min, carry .imgwhl and .variants), issue 15: the batched augmentation's host
# and GPU time in float16 with 4 (the default), 2 and 1 window groups a batch (fewer groups:
# fewer launches, more padding, which float16 tensor cores make cheaper); then the GPU JPEG
# loader in one process and with 2 workers for each.
set -u
export PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=$PWD/.site/nvidia/cu13/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt
timeout 560 python3 benchmarks/diag/jpeg_budget_probe.py 8000 6 --augment-only --no-mps \
  --loaders "g4:src:0,2;g2:.variants/g2:0,2;g1:.variants/g1:0,2;g4:src:4;g1:.variants/g1:4" 2>&1 \
  | grep -v -i "nvjpeg2k\|nvtiff\|^\[" > $OUT/jpeg_budget_probe.log
cut -c1-420 $OUT/jpeg_budget_probe.log
echo "done at ${SECONDS} s"
