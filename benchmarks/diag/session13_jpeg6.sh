#!/bin/bash
# Session 13: the GPU JPEG loader decoding into the images of finished batches (nvImageCodec
# allocates new ones otherwise, their memory freed as they are dropped), with torch's
# intra-op threads at 16 or 1; the image cuda tests first. 20,000 links to 4,000 JPEGs.
set -u
export LD_LIBRARY_PATH=$PWD/.site/nvidia/cu13/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt
VIDLOADER_FAIL_WITHOUT_CUDA=1 timeout 120 python3 -m pytest -q -p no:cacheprovider -m cuda tests/test_images.py tests/test_images_batched.py 2>&1 | grep -v -i "nvjpeg2k\|nvtiff" > $OUT/cuda_tests.log; grep -E "^FAILED|^E  |passed|failed" $OUT/cuda_tests.log | head -10 | cut -c1-400
for setting in "AB_REUSE=0" "AB_REUSE=1" "AB_REUSE=0 AB_TORCH_THREADS=1" "AB_REUSE=1 AB_TORCH_THREADS=1"; do
  tag=$(echo $setting | tr ' =' '__')
  echo "== $setting"
  env $setting AB_COPIES=5 AB_ONLY="whole images" timeout 150 python3 benchmarks/diag/jpeg_loader_ab.py 4000 60 2>&1 | grep -v -i "nvjpeg2k\|nvtiff\|^\[" > $OUT/ab_$tag.log
  cp $OUT/jpeg_loader_ab.json $OUT/ab_$tag.json; grep "images/s" $OUT/ab_$tag.log
done
rm -f $OUT/jpeg_loader_ab.json
