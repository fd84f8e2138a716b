#!/bin/bash
# WRITTEN IN SESSION 23, NOT YET RUN. Issue 15, one call (~300 s; carry .whl and .imgwhl, and
# LD_LIBRARY_PATH=$PWD/.site/nvidia/cu13/lib after installing .imgwhl/*.whl into .site):
# the in-process GPU JPEG pool (num_workers=0) with its decode lanes' CUDA streams at the
# default priority and at high priority (DECODE_STREAM_PRIORITY -1: nvImageCodec's kernels ahead
# of the augmentation's; session 17 saw the decode 8× slower beside matrix products on another
# stream), alternated twice, then nvImageCodec's decode alone and DALI for reference.
set -u
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/gpu.txt"
VIDLOADER_FAIL_WITHOUT_CUDA=1 timeout 90 python3 -m pytest -q -p no:cacheprovider -m cuda \
  tests/test_images.py 2>&1 | tail -3 > "$OUT/cuda_tests.log"; cat "$OUT/cuda_tests.log"
for round in 1 2; do
  for prio in 0 -1; do
    AB_ONLY="2 lanes, whole images" AB_DECODE_PRIORITY=$prio OUT=/tmp/ab-$round-$prio \
      timeout 90 python3 benchmarks/diag/jpeg_loader_ab.py 4000 60 2>&1 | grep -E "images/s" \
      | sed "s/^/round $round priority $prio: /" | tee -a "$OUT/summary.txt"
  done
done
echo "done at ${SECONDS} s"
