#!/bin/bash
# Session 19 (~4 min, carry .imgwhl and .variants), issue 15: does only one worker process
# get nvImageCodec's hardware JPEG decoder? (session19-2: the JPEG engine's share of the
# time fell as 1/K with K workers at the same ~10k images/s, SM time rose to 94%.) The GPU JPEG
# loader with 2 and 4 workers: every worker offering JPEGs to the hardware decoder (the
# default), only the first ("hw-one", the others CUDA alone), none ("hw-none").
set -u
export PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=$PWD/.site/nvidia/cu13/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt
timeout 560 python3 benchmarks/diag/jpeg_budget_probe.py 8000 6 --no-stages --no-mps \
  --loaders "default:src:2,4;hw-one:.variants/hw-one:2,4;hw-none:.variants/hw-none:2,4;default:src:1" 2>&1 \
  | grep -v -i "nvjpeg2k\|nvtiff\|^\[" > $OUT/jpeg_budget_probe.log
cut -c1-420 $OUT/jpeg_budget_probe.log
echo "done at ${SECONDS} s"
