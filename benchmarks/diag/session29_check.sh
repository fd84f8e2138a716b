#!/bin/bash
# Written in session 28; ran in session 29 (benchmarks/results/gpu/session29-1). Issue 15, one call (~450 s; carry .imgwhl; kind
# nvidia-h200). Session 28 made nvJPEG's hardware decoder (called directly) and the
# one-process pool with 3 lanes the default (median 0.88 of DALI idle, 1.14 beside torch host
# work, session28-13), then mended it after review without a GPU: two nvJPEG states a decoder
# used in turn, each reused only once its last batch has left the GPU; a stricter header walk
# (images/_jpeg_header.py). (1) the image cuda tests, first among them the new stress test
# (back-to-back batches on side streams and threads, sources overwritten after each call,
# against nvImageCodec's pixels); (2) the loader's timeline with nvJPEG (3 and 2 lanes): where
# does the time go now?; (3) the one-process loader, 3 lanes against 4, and chroma repeated
# (DALI's, ':fancy_upsampling=0') against interpolated, alternated twice.
# Then, on the same warm machine: DALI's three upload calls and session28_final.sh (the bench
# with DALI, three rounds, and one round beside torch host work) to see the mends' cost.
set -u
export PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=$PWD/.site/nvidia/cu13/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/gpu.txt"
VIDLOADER_FAIL_WITHOUT_CUDA=1 timeout 150 python3 -m pytest -q -s -p no:cacheprovider -m cuda \
  tests/test_nvjpeg.py tests/test_images.py tests/test_images_workers.py tests/test_images_batched.py \
  tests/test_image_memory.py 2>&1 | grep -v -i "nvjpeg2k\|nvtiff" > "$OUT/cuda_tests.log"
grep -E "passed|failed|^FAILED|^ERROR" "$OUT/cuda_tests.log" | tail -8
timeout 100 python3 -c "from vidloader.images._synthetic import write_image_folder as w; w('/tmp/jpeg-ab-x1', num_classes=10, per_class=400)"
TIMELINE_ONLY="3 lanes, prefetch 2;2 lanes, prefetch 2" timeout 120 python3 benchmarks/diag/jpeg_loader_timeline.py 4000 150 2>&1 \
  | grep -v -i "nvjpeg2k\|nvtiff" | tee "$OUT/timeline.log" | grep -E "images/s|Error"
ab() {  # label variant [AB_OPTIONS]
  mkdir -p "$OUT/$1"
  AB_OPTIONS="${3:-}" AB_ONLY="$2" AB_REFERENCES=0 OUT="$OUT/$1" timeout 60 python3 benchmarks/diag/jpeg_loader_ab.py 4000 150 2>&1 \
    | grep -E "images/s|Error" | sed "s/^/$1: /" | tee -a "$OUT/summary.txt"
}
for round in 1 2; do
  [ $SECONDS -lt 520 ] && ab "r$round-3lanes" "3 lanes, whole images"
  [ $SECONDS -lt 520 ] && ab "r$round-4lanes" "4 lanes, whole images"
  [ $SECONDS -lt 520 ] && ab "r$round-3lanes-simple" "3 lanes, whole images" ":fancy_upsampling=0"
done
rm -rf "$OUT"/r?-*
echo "done at ${SECONDS} s"
