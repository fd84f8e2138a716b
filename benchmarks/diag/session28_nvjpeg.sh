#!/bin/bash
# Session 28, call 1 (issue 15; ~480 s; carry .imgwhl; kind nvidia-h200). nvJPEG's hardware
# decoder called directly (images/_nvjpeg.py, new): (1) its tests and the image cuda tests;
# (2) nvjpeg_probe.py, the decode alone against nvImageCodec's packed decode and torchvision's
# batched decode_jpeg, three rounds; (3) the loader with PACKED_JPEG_ENGINE nvjpeg against
# nvimgcodec, one process (2 lanes, 2 readers) and 2 GPU workers, alternated twice.
set -u
export PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=$PWD/.site/nvidia/cu13/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/gpu.txt"
VIDLOADER_FAIL_WITHOUT_CUDA=1 timeout 150 python3 -m pytest -q -s -p no:cacheprovider -m cuda \
  tests/test_nvjpeg.py tests/test_images.py tests/test_images_workers.py tests/test_images_batched.py \
  tests/test_image_memory.py 2>&1 | grep -v -i "nvjpeg2k\|nvtiff" > "$OUT/cuda_tests.log"
grep -E "passed|failed|^FAILED|^ERROR" "$OUT/cuda_tests.log" | tail -8
timeout 120 python3 -c "from vidloader.images._synthetic import write_image_folder as w; w('/tmp/jpeg-ab-x1', num_classes=10, per_class=400)"
timeout 140 python3 benchmarks/diag/nvjpeg_probe.py 4000 30 2>&1 | grep -v -i "nvjpeg2k\|nvtiff" \
  | tee "$OUT/nvjpeg_probe.log" | grep -E "images/s|Error|stages|agreement|libnvjpeg"
ab() {  # label engine workers
  mkdir -p "$OUT/$1"
  AB_ENGINE=$2 AB_WORKERS=$3 AB_ONLY="2 lanes, whole images" AB_REFERENCES=0 OUT="$OUT/$1" \
    timeout $(( 585 - SECONDS )) python3 benchmarks/diag/jpeg_loader_ab.py 4000 150 2>&1 \
    | grep -E "images/s|Error" | sed "s/^/$1: /" | tee -a "$OUT/summary.txt"
}
for round in 1 2; do
  for w in 0 2; do
    [ $SECONDS -lt 540 ] && ab "r$round-w$w-nvjpeg" nvjpeg $w
    [ $SECONDS -lt 555 ] && ab "r$round-w$w-nvimgcodec" nvimgcodec $w
  done
done
rm -rf "$OUT"/r?-*
echo "done at ${SECONDS} s"
