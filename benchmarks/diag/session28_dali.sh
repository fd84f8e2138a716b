#!/bin/bash
# Session 28, call 5 (issue 15; carry .imgwhl; DALI unpacked to $HOME/dalisite by calls 2-4 on
# the same warm machine, as session 27's calls 3-5). nvJPEG's hardware decoder called directly
# is now the default (PACKED_JPEG_ENGINE = "nvjpeg", session28-1). (1) the image cuda tests
# (now on nvjpeg; the memory plan's GPU test mended); (2) `vidloader bench images --workload
# jpeg` on 40,000 files with DALI, three rounds alternated, as session27-6 (0.58 / 0.77 / 0.62):
# the ratio to DALI within each round, with nvidia-smi's JPEG decoder utilisation per row.
set -u
export PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=$PWD/.site/nvidia/cu13/lib:${LD_LIBRARY_PATH:-}
export PYTHONPATH=$PYTHONPATH:$HOME/dalisite
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt
python3 -c "import nvidia.dali as d; print('DALI', d.__version__)" 2>&1 | tail -1 | tee $OUT/dali.txt
VIDLOADER_FAIL_WITHOUT_CUDA=1 timeout 150 python3 -m pytest -q -s -p no:cacheprovider -m cuda \
  tests/test_nvjpeg.py tests/test_images.py tests/test_images_workers.py tests/test_images_batched.py \
  tests/test_image_memory.py 2>&1 | grep -v -i "nvjpeg2k\|nvtiff" > "$OUT/cuda_tests.log"
grep -E "passed|failed|^FAILED|^ERROR" "$OUT/cuda_tests.log" | tail -8
timeout $(( 585 - SECONDS )) python3 -m vidloader.bench images --workload jpeg --images 4000 --copies 10 \
  --batches 300 --rounds 3 --data-dir /tmp/bench-images --out $OUT/images 2>&1 \
  | grep -v -i "nvjpeg2k\|nvtiff\|^\[" > $OUT/bench_images.log
tail -30 $OUT/bench_images.log
echo "bench done at ${SECONDS} s"
