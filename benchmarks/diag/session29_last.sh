#!/bin/bash
# Session 29, last call (issue 15; carry .imgwhl; kind nvidia-h200; ~330 s). The fused Triton
# crop/resize is the default (session29-4: 138,551 images/s alone against the matmuls'
# 72,297; the augmentation thread 25-31% busy instead of 76%; session29-8: the default
# 22,285 / 22,755 / 21,930 against DALI's 23,091 / 23,446 / 22,881). (1) the image cuda tests
# (the memory test now allows the two batches the loop holds); (2) the timeline, split finer
# inside the lane job: the read's wait, nvJPEG's hardware call, the state wait, the hand-on;
# (3) the loader alternated, 300 batches: fused against matmul, and fused with 4 lanes and
# with 3 reader processes.
set -u
export PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=$PWD/.site/nvidia/cu13/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/gpu.txt"
VIDLOADER_FAIL_WITHOUT_CUDA=1 timeout 150 python3 -m pytest -q -s -p no:cacheprovider -m cuda \
  tests/test_triton_resize.py tests/test_nvjpeg.py tests/test_images.py tests/test_images_workers.py \
  tests/test_images_batched.py tests/test_image_memory.py 2>&1 | grep -v -i "nvjpeg2k\|nvtiff" > "$OUT/cuda_tests.log"
grep -E "passed|failed|^FAILED|^ERROR" "$OUT/cuda_tests.log" | tail -8
timeout 100 python3 -c "from vidloader.images._synthetic import write_image_folder as w; w('/tmp/jpeg-ab-x1', num_classes=10, per_class=400)"
TIMELINE_ONLY="3 lanes, prefetch 2" timeout 80 python3 benchmarks/diag/jpeg_loader_timeline.py 4000 150 2>&1 \
  | grep -v -i "nvjpeg2k\|nvtiff" > "$OUT/timeline_log.txt"; grep -E "images/s|Error" "$OUT/timeline_log.txt"
ab() {  # label variant resize readers
  mkdir -p "$OUT/$1"
  AB_READERS="$4" AB_RESIZE="$3" AB_ONLY="$2" AB_REFERENCES=0 OUT="$OUT/$1" timeout 60 python3 benchmarks/diag/jpeg_loader_ab.py 4000 300 2>&1 \
    | grep -E "images/s|Error" | sed "s/^/$1: /" | tee -a "$OUT/summary.txt"
}
for round in 1 2; do
  [ $SECONDS -lt 330 ] && ab "r$round-fused" "3 lanes, whole images" triton 2
  [ $SECONDS -lt 330 ] && ab "r$round-matmul" "3 lanes, whole images" matmul 2
  [ $SECONDS -lt 330 ] && ab "r$round-fused-4lanes" "4 lanes, whole images" triton 2
  [ $SECONDS -lt 330 ] && ab "r$round-fused-3readers" "3 lanes, whole images" triton 3
done
rm -rf "$OUT"/r?-*
echo "done at ${SECONDS} s"
