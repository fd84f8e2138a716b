#!/bin/bash
# Session 13: is the GPU JPEG loader held by the GIL's hand-over? The same settings with
# Python's switch interval at 5 ms (default) and 0.1 ms, on 20,000 links to 4,000 JPEGs.
set -u
export LD_LIBRARY_PATH=$PWD/.site/nvidia/cu13/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt
for sw in default 0.0001; do
  extra=""; [ $sw != default ] && extra="AB_SWITCH=$sw"
  echo "== switch interval $sw"
  env $extra AB_COPIES=5 AB_ONLY="lane" timeout 200 python3 benchmarks/diag/jpeg_loader_ab.py 4000 60 2>&1 | grep -v -i "nvjpeg2k\|nvtiff\|^\[" > $OUT/jpeg_loader_ab_$sw.log
  cp $OUT/jpeg_loader_ab.json $OUT/jpeg_loader_ab_$sw.json; grep "images/s" $OUT/jpeg_loader_ab_$sw.log
done
