#!/bin/bash
# WRITTEN IN SESSION 23, NOT YET RUN. Issue 15, one call (~300 s; carry .whl and .imgwhl, and
# LD_LIBRARY_PATH=$PWD/.site/nvidia/cu13/lib after installing .imgwhl/*.whl into .site):
# the in-process GPU JPEG pool (num_workers=0) with its decode lanes' CUDA streams at the
# default priority and at high priority (DECODE_STREAM_PRIORITY -1: nvImageCodec's kernels ahead
# of the augmentation's; session 17 saw the decode 8× slower beside matrix products on another
# stream), alternated twice; each run also prints nvImageCodec's decode alone (and DALI's
# pipeline, or its import error, unless DALI is on PYTHONPATH) on the same files. Caveat:
# nvImageCodec may decode on internal streams of its own, ordered with the lane's by events,
# in which case the lane's priority does not reach its kernels and no difference is expected.
set -u
export PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=$PWD/.site/nvidia/cu13/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/gpu.txt"
VIDLOADER_FAIL_WITHOUT_CUDA=1 timeout 90 python3 -m pytest -q -p no:cacheprovider -m cuda \
  tests/test_images.py 2>&1 | tail -3 > "$OUT/cuda_tests.log"; cat "$OUT/cuda_tests.log"
for round in 1 2; do
  for prio in 0 -1; do
    mkdir -p "$OUT/ab-$round-$prio"  # the run's JSON comes back with the call
    AB_ONLY="2 lanes, whole images" AB_DECODE_PRIORITY=$prio OUT="$OUT/ab-$round-$prio" \
      timeout 90 python3 benchmarks/diag/jpeg_loader_ab.py 4000 60 2>&1 \
      | grep -E "images/s|Error" | sed "s/^/round $round priority $prio: /" | tee -a "$OUT/summary.txt"
  done
done
echo "done at ${SECONDS} s"
