#!/bin/bash
# Session 27, call 7 (issue 15; ~250 s; carry .imgwhl). The one-process GPU JPEG loader's
# timeline, batch by batch (jpeg_loader_timeline.py): lanes 2 or 1, prefetch 2 or 4, two
# rounds alternated, 150 batches each; where the decoder sits idle while the loader runs.
set -u
export PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=$PWD/.site/nvidia/cu13/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/gpu.txt"
timeout 500 python3 benchmarks/diag/jpeg_loader_timeline.py 4000 150 2>&1 | grep -v -i "nvjpeg2k\|nvtiff" \
  | tee "$OUT/timeline.log" | grep -E "images/s|Error"
echo "done at ${SECONDS} s"
