#!/bin/bash
# Written in session 29, run as session 30's call 1. Issue 15, one call (~420 s; carry .imgwhl; kind
# nvidia-h200). Session 29 made the crop/resize one Triton kernel (measured: session29-4, -8,
# -9; median 0.965 of DALI) and, after its device time was spent, moved the JPEG header walk
# out of the decode lanes: a faster walk, done by the reader processes
# (_image_decode.READERS_WALK_HEADERS, on), and mended the kernel after review (int64 output
# addresses, a one-axis grid, in-memory resizing crops through it). (1) the image cuda tests
# (test_triton_resize's first: the mended kernel has not run on a GPU); (2) the timeline
# (3 lanes): is the lane's time around nvJPEG's call (6.6 ms a batch in session29-9) gone?;
# (3) the loader, the readers walking the headers against the lanes walking them, alternated,
# three rounds of 300 batches, and the readers walking at prefetch 3 (session 30: the lanes
# waited ~4.9 ms a batch for their reads in session29-9; a deeper prefetch asks for them sooner). Then, on the same warm machine: DALI's three upload calls and
# `bench images --rounds 3` (session29-8's command, in its script.txt).
set -u
export PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=$PWD/.site/nvidia/cu13/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/gpu.txt"
VIDLOADER_FAIL_WITHOUT_CUDA=1 timeout 150 python3 -m pytest -q -s -p no:cacheprovider -m cuda \
  tests/test_triton_resize.py tests/test_nvjpeg.py tests/test_images.py tests/test_images_workers.py \
  tests/test_images_batched.py tests/test_image_memory.py tests/test_image_readers.py 2>&1 \
  | grep -v -i "nvjpeg2k\|nvtiff" > "$OUT/cuda_tests.log"
grep -E "passed|failed|^FAILED|^ERROR" "$OUT/cuda_tests.log" | tail -8
timeout 100 python3 -c "from vidloader.images._synthetic import write_image_folder as w; w('/tmp/jpeg-ab-x1', num_classes=10, per_class=400)"
TIMELINE_ONLY="3 lanes, prefetch 2" timeout 80 python3 benchmarks/diag/jpeg_loader_timeline.py 4000 150 2>&1 \
  | grep -v -i "nvjpeg2k\|nvtiff" > "$OUT/timeline_log.txt"; grep -E "images/s|Error" "$OUT/timeline_log.txt"
ab() {  # label walk prefetch
  mkdir -p "$OUT/$1"
  AB_READERS_WALK="$2" AB_PREFETCH="$3" AB_ONLY="3 lanes, whole images" AB_REFERENCES=0 OUT="$OUT/$1" timeout 60 \
    python3 benchmarks/diag/jpeg_loader_ab.py 4000 300 2>&1 | grep -E "images/s|Error" | sed "s/^/$1: /" \
    | tee -a "$OUT/summary.txt"
}
for round in 1 2 3; do
  [ $SECONDS -lt 380 ] && ab "r$round-readers-walk" 1 2
  [ $SECONDS -lt 380 ] && ab "r$round-lanes-walk" 0 2
  [ $SECONDS -lt 380 ] && ab "r$round-readers-walk-prefetch3" 1 3
done
rm -rf "$OUT"/r?-*
echo "done at ${SECONDS} s"
