#!/bin/bash
# Session 13: are the GPU JPEG loader's decode calls slowed by too many CPU threads? Two
# lanes / one lane, whole images, with torch's intra-op threads at 16 (default) or 1 and
# each nvImageCodec decoder's own pool at 16 (default), 4 or 2 threads; 20,000 links.
set -u
export LD_LIBRARY_PATH=$PWD/.site/nvidia/cu13/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt
for setting in "default" "AB_TORCH_THREADS=1" "AB_NV_THREADS=4" "AB_NV_THREADS=2 AB_TORCH_THREADS=1"; do
  tag=$(echo $setting | tr ' =' '__')
  echo "== $setting"
  env ${setting/default/} AB_COPIES=5 AB_ONLY="whole images" timeout 150 python3 benchmarks/diag/jpeg_loader_ab.py 4000 60 2>&1 | grep -v -i "nvjpeg2k\|nvtiff\|^\[" > $OUT/ab_$tag.log
  cp $OUT/jpeg_loader_ab.json $OUT/ab_$tag.json; grep "images/s" $OUT/ab_$tag.log
done
rm -f $OUT/jpeg_loader_ab.json
