#!/bin/bash
# Session 29, call 3 (issue 15; carry .imgwhl; kind nvidia-h200). Session 29's first call
# (session29-1) timed the default loader's stages: the augmentation thread busy 76% at
# 10.5 ms a batch of 256 (a ceiling near 24,400 images/s) while the JPEG decoder was 57%
# busy. The crop/resize now runs as one Triton kernel reading each window where nvJPEG put
# it (images/_triton_resize.py) instead of a packed float16 copy and two bmm. (1) the image
# cuda tests, the fused kernel's first among them; (2) the augmentation alone, batch 256,
# fused against the matmuls; (3) the loader's timeline (3 lanes, fused); (4) the loader,
# fused against matmul alternated, 3 lanes, and fused with 2 and 4 lanes.
set -u
export PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=$PWD/.site/nvidia/cu13/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/gpu.txt"
python3 -c "import triton; print('triton', triton.__version__)" > "$OUT/triton.txt" 2>&1
VIDLOADER_FAIL_WITHOUT_CUDA=1 timeout 170 python3 -m pytest -q -s -p no:cacheprovider -m cuda \
  tests/test_triton_resize.py tests/test_nvjpeg.py tests/test_images.py tests/test_images_workers.py \
  tests/test_images_batched.py tests/test_image_memory.py 2>&1 | grep -v -i "nvjpeg2k\|nvtiff" > "$OUT/cuda_tests.log"
grep -E "passed|failed|^FAILED|^ERROR" "$OUT/cuda_tests.log" | tail -8
timeout 90 python3 -m vidloader.bench images --workload resize --device cuda --batch-size 256 \
  --resize-reps 20 --out /tmp/resize 2>&1 | grep -v -i "nvjpeg2k\|nvtiff" | tee "$OUT/resize.log" | grep -E "images/s"
cp /tmp/resize/*.json "$OUT/" 2>/dev/null
timeout 100 python3 -c "from vidloader.images._synthetic import write_image_folder as w; w('/tmp/jpeg-ab-x1', num_classes=10, per_class=400)"
TIMELINE_ONLY="3 lanes, prefetch 2" timeout 90 python3 benchmarks/diag/jpeg_loader_timeline.py 4000 150 2>&1 \
  | grep -v -i "nvjpeg2k\|nvtiff" | tee "$OUT/timeline.log" | grep -E "images/s|Error"
ab() {  # label variant resize
  mkdir -p "$OUT/$1"
  AB_RESIZE="$3" AB_ONLY="$2" AB_REFERENCES=0 OUT="$OUT/$1" timeout 60 python3 benchmarks/diag/jpeg_loader_ab.py 4000 150 2>&1 \
    | grep -E "images/s|Error" | sed "s/^/$1: /" | tee -a "$OUT/summary.txt"
}
for round in 1 2; do
  [ $SECONDS -lt 500 ] && ab "r$round-3lanes-fused" "3 lanes, whole images" triton
  [ $SECONDS -lt 500 ] && ab "r$round-3lanes-matmul" "3 lanes, whole images" matmul
  [ $SECONDS -lt 500 ] && ab "r$round-2lanes-fused" "2 lanes, whole images" triton
  [ $SECONDS -lt 500 ] && ab "r$round-4lanes-fused" "4 lanes, whole images" triton
done
rm -rf "$OUT"/r?-*
echo "done at ${SECONDS} s"
