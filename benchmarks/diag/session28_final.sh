#!/bin/bash
# Session 28, call 13 (issue 15; carry .imgwhl; DALI unpacked to $HOME/dalisite by calls 10-12
# on the same warm machine). The new defaults: nvJPEG's hardware decoder called directly
# (session28-1), the in-process pool (GPU_IMAGE_WORKERS = 0; session28-1, -5, -9) with three
# decode lanes (session28-9). (1) the image cuda tests on those defaults; (2) `vidloader bench
# images --workload jpeg` with DALI, three rounds alternated: the default against DALI within
# each round, and 2 GPU workers beside them; (3) as time allows, one round with the consumer
# working 10 ms of small torch ops after each batch.
set -u
export PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=$PWD/.site/nvidia/cu13/lib:${LD_LIBRARY_PATH:-}
export PYTHONPATH=$PYTHONPATH:$HOME/dalisite
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt
python3 -c "import nvidia.dali as d; print('DALI', d.__version__)" 2>&1 | tail -1 | tee $OUT/dali.txt
VIDLOADER_FAIL_WITHOUT_CUDA=1 timeout 120 python3 -m pytest -q -s -p no:cacheprovider -m cuda \
  tests/test_nvjpeg.py tests/test_images.py tests/test_images_workers.py tests/test_images_batched.py \
  tests/test_image_memory.py 2>&1 | grep -v -i "nvjpeg2k\|nvtiff" > "$OUT/cuda_tests.log"
grep -E "passed|failed|^FAILED|^ERROR" "$OUT/cuda_tests.log" | tail -8
bench() {  # label, then bench options
  local label=$1; shift
  echo "== $label: $*" >> $OUT/bench_images.log
  timeout $(( 560 - SECONDS )) python3 -m vidloader.bench images --workload jpeg --images 4000 \
    --copies 10 --batches 300 --data-dir /tmp/bench-images --out /tmp/bench-json/$label "$@" 2>&1 \
    | grep -v -i "nvjpeg2k\|nvtiff\|^\[" | tee -a $OUT/bench_images.log | sed "s/^/$label: /" | tail -24
  echo "$label done at ${SECONDS} s"
}
bench idle --rounds 3
[ $SECONDS -lt 400 ] && bench torch10 --host-ms 10 --host-work torch
tar czf $OUT/bench_json.tgz -C /tmp bench-json
