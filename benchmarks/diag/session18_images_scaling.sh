#!/bin/bash
# Session 18, call 1 (~5 min, carry .imgwhl), issue 15: the GPU JPEG loader (224² random
# resized crop + flip + normalize, batch 256) and nvImageCodec's decode alone, in 1, 2, 3, 4
# processes at once on one GPU (benchmarks/diag/process_scaling_probe.py).
set -u
export PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=$PWD/.site/nvidia/cu13/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt
timeout 420 python3 benchmarks/diag/process_scaling_probe.py 8000 6 1,2,3,4 loader,decode 2>&1 \
  | grep -v -i "nvjpeg2k\|nvtiff\|^\[" > $OUT/process_scaling_probe.log
grep processes $OUT/process_scaling_probe.log
echo "done at ${SECONDS} s"
