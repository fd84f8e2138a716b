#!/bin/bash
# Session 13: how fast one GPU decodes JPEGs and how it must be fed (issue 15): decode-alone
# variants (benchmarks/diag/jpeg_decode_probe.py), then the image bench's JPEG workload as the
# baseline of the loader on the same machine. Carry .imgwhl (nvImageCodec 0.9 + nvJPEG 13).
set -u
export LD_LIBRARY_PATH=$PWD/.site/nvidia/cu13/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt
timeout 240 python3 benchmarks/diag/jpeg_decode_probe.py 4000 4 2>&1 | grep -v -i "nvjpeg2k\|nvtiff" > $OUT/jpeg_decode_probe.log
cat $OUT/jpeg_decode_probe.log | tail -20
timeout 150 python3 -m vidloader bench images --workload jpeg --images 4000 --batches 60 --out $OUT > $OUT/images.log 2>&1; grep -v -i "nvjpeg2k\|nvtiff\|^\[" $OUT/images.log | tail -8
