#!/bin/bash
# Session 25, issue 15, one call (~400 s, carry .imgwhl): batches decoded into one flat buffer
# (nvImageCodec's decode(..., images=), PackedImages) against a list of images (as before).
# (1) the probe: pixels of decode_packed against decode_files (regular, gray, CMYK,
# progressive, EXIF-rotated), per-image costs, one thread's decode rates; (2) the image cuda
# tests (now through the packed path); (3) the loader in one process and in 2 / 4 GPU workers,
# packed against not, alternated; (4) a stack profile of the packed in-process pool.
set -u
export PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=$PWD/.site/nvidia/cu13/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/gpu.txt"
timeout 120 python3 benchmarks/diag/jpeg_into_buffer_probe.py 4000 40 2>&1 \
  | grep -v -i "nvjpeg2k\|nvtiff" > "$OUT/probe.log"; tail -30 "$OUT/probe.log"
VIDLOADER_FAIL_WITHOUT_CUDA=1 timeout 120 python3 -m pytest -q -p no:cacheprovider -m cuda \
  tests/test_images.py tests/test_images_workers.py 2>&1 | grep -v -i "nvjpeg2k\|nvtiff" \
  | tail -6 > "$OUT/cuda_tests.log"; cat "$OUT/cuda_tests.log"
ab() {  # label packed(1/0) workers variant
  mkdir -p "$OUT/$1"
  AB_PACKED=$2 AB_WORKERS=$3 AB_ONLY="$4" AB_REFERENCES=0 OUT="$OUT/$1" \
    timeout 80 python3 benchmarks/diag/jpeg_loader_ab.py 4000 150 2>&1 \
    | grep -E "images/s|Error" | sed "s/^/$1 (packed $2, workers $3): /" | tee -a "$OUT/summary.txt"
}
for round in 1 2; do
  ab "r$round-inproc-packed" 1 0 "2 lanes, whole images"
  ab "r$round-inproc-list" 0 0 "2 lanes, whole images"
  ab "r$round-workers2-packed" 1 2 "2 lanes, whole images"
  ab "r$round-workers2-list" 0 2 "2 lanes, whole images"
done
ab "inproc3-packed" 1 0 "3 lanes, whole images"
ab "workers4-packed" 1 4 "2 lanes, whole images"
mkdir -p "$OUT/profile"
AB_ONLY="2 lanes, whole images" AB_PROFILE="2 lanes, whole images" AB_REFERENCES=0 OUT="$OUT/profile" \
  timeout 80 python3 benchmarks/diag/jpeg_loader_ab.py 4000 150 > "$OUT/profile/profile.log" 2>&1
grep -E "images/s" "$OUT/profile/profile.log" | sed "s/^/profiled (packed): /" | tee -a "$OUT/summary.txt"
echo "done at ${SECONDS} s"
