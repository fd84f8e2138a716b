#!/bin/bash
# Session 30, call 2 (issue 15; ~380 s; carry .imgwhl; kind nvidia-h200). Call 1
# (session30-1) found the lanes waiting 13-17 ms a batch for their reads and nvJPEG's call
# at 13-15 ms, two calls at once 13-32% of the time. DALI hands its hardware decoder
# bitstreams in pinned memory and calls nvjpegDecodeBatchedPreAllocate; vidloader now does
# both (_image_decode.PIN_READ_SLABS: the readers' slabs page-locked, freed behind the
# decode's event; _nvjpeg.PREALLOCATE_IMAGES = 256). (1) the image cuda tests (a new one:
# page-locked slabs give the batches pageable ones give); (2) nvjpeg_input_probe.py: the
# decode alone, pageable/pinned x preallocated or not, 1 and 3 threads, with each call's
# thread CPU time; (3) the timeline (now with thread CPU time and the reads' latency), as
# shipped and with both off; (4) the loader, alternated, 300 batches: both on, pin off,
# preallocation off, both off.
set -u
export PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=$PWD/.site/nvidia/cu13/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/gpu.txt"
VIDLOADER_FAIL_WITHOUT_CUDA=1 timeout 150 python3 -m pytest -q -s -p no:cacheprovider -m cuda \
  tests/test_image_readers.py tests/test_nvjpeg.py tests/test_triton_resize.py tests/test_images.py \
  tests/test_images_workers.py tests/test_images_batched.py tests/test_image_memory.py 2>&1 \
  | grep -v -i "nvjpeg2k\|nvtiff" > "$OUT/cuda_tests.log"
grep -E "passed|failed|^FAILED|^ERROR" "$OUT/cuda_tests.log" | tail -8
timeout 150 python3 benchmarks/diag/nvjpeg_input_probe.py 3 2>&1 | grep -v -i "nvjpeg2k\|nvtiff" \
  > "$OUT/probe.log"; cut -c1-220 "$OUT/probe.log"
for v in "shipped 1 256" "both-off 0 0"; do
  set -- $v; mkdir -p "$OUT/timeline-$1"
  AB_PIN=$2 AB_PREALLOC=$3 OUT="$OUT/timeline-$1" TIMELINE_ONLY="3 lanes, prefetch 2" timeout 80 \
    python3 benchmarks/diag/jpeg_loader_timeline.py 4000 150 2>&1 | grep -v -i "nvjpeg2k\|nvtiff" \
    > "$OUT/timeline-$1/log.txt"; grep -E "images/s|Error" "$OUT/timeline-$1/log.txt" | sed "s/^/$1: /"
done
ab() {  # label pin prealloc
  mkdir -p "$OUT/$1"
  AB_PIN="$2" AB_PREALLOC="$3" AB_ONLY="3 lanes, whole images" AB_REFERENCES=0 OUT="$OUT/$1" \
    timeout 60 python3 benchmarks/diag/jpeg_loader_ab.py 4000 300 2>&1 | grep -E "images/s|Error" \
    | sed "s/^/$1: /" >> "$OUT/summary.txt"
}
for round in 1 2 3; do
  [ $SECONDS -lt 370 ] && ab "r$round-both-on" 1 256
  [ $SECONDS -lt 370 ] && ab "r$round-pin-off" 0 256
  [ $SECONDS -lt 370 ] && ab "r$round-prealloc-off" 1 0
  [ $SECONDS -lt 370 ] && ab "r$round-both-off" 0 0
done
rm -rf "$OUT"/r?-*
cat "$OUT/summary.txt"
echo "done at ${SECONDS} s"
