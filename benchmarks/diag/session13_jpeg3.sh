#!/bin/bash
# Session 13: the GPU JPEG loader's settings on a folder five times longer than the files
# generated (20,000 hard links to 4,000 JPEGs: 78 batches an epoch, so the 60 timed batches
# hold no epoch boundary), one variant stack-sampled. Carry .imgwhl.
set -u
export LD_LIBRARY_PATH=$PWD/.site/nvidia/cu13/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt
AB_COPIES=5 AB_PROFILE="2 lanes, regions" timeout 300 python3 benchmarks/diag/jpeg_loader_ab.py 4000 60 2>&1 | grep -v -i "nvjpeg2k\|nvtiff\|^\[" > $OUT/jpeg_loader_ab.log; grep "images/s" $OUT/jpeg_loader_ab.log
python3 - <<'PY'
import json, os
d = json.load(open(os.environ["OUT"] + "/jpeg_loader_ab.json"))
prof = d.get("2 lanes, regions profile", {}).get("run", {})
for group, e in prof.items():
    print(group, e["samples"], "leaf:", e["leaf"][:4])
    print("   ours:", e["ours"][:4])
PY
