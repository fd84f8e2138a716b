#!/bin/bash
# Written in session 26, run as session 27's call 1 (benchmarks/results/gpu/session27-1). Issue 15, one call (~350 s; carry .imgwhl; kind
# nvidia-h200). (1) the image cuda tests, among them
# test_nvimgcodec_default_upsampling_is_closer_to_pillow_than_simple (restated in session 26
# after call 4; not yet run in that form), with the session 26 defaults (reader processes,
# read-ahead). (2) jpeg_engines_probe.py, 3 s a row, three rounds: nvImageCodec's raw decode by
# output format (interleaved / planar RGB) and EXIF orientation beside vidloader's packed
# decode and torchvision's batched nvJPEG, which drives the same hardware decoder faster
# (20,424 against 16,263, session26-9); then nvJPEG's CUDA decoder (nvImageCodec's
# HYBRID_CPU_GPU backend, GPU or CPU Huffman) alone and beside the hardware decoder on
# separate threads, totals summed: if "hw + cuda" clearly beats "hw" in every round, the next
# step is lanes of different backends sharing each batch in proportion to their pace. (3) the
# one-process loader (2 reader processes, as shipped since session 26) at prefetch 2 and 4,
# alternated twice: its lanes waited 19-25% of the time for work in session26-1's profile.
set -u
export PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=$PWD/.site/nvidia/cu13/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/gpu.txt"
timeout 120 python3 -c "from vidloader.images._synthetic import write_image_folder as w; w('/tmp/jpeg-ab-x1', num_classes=10, per_class=400)"
VIDLOADER_FAIL_WITHOUT_CUDA=1 timeout 120 python3 -m pytest -q -s -p no:cacheprovider -m cuda \
  tests/test_images.py tests/test_images_workers.py tests/test_images_batched.py 2>&1 \
  | grep -v -i "nvjpeg2k\|nvtiff" > "$OUT/cuda_tests.log"; grep -E "passed|failed|^FAILED|^ERROR" "$OUT/cuda_tests.log" | tail -6
timeout $(( 420 - SECONDS )) python3 benchmarks/diag/jpeg_engines_probe.py 4000 30 2>&1 | grep -v -i "nvjpeg2k\|nvtiff" \
  | tee "$OUT/engines_probe.log" | grep -E "images/s|Error"
ab() {  # label prefetch
  mkdir -p "$OUT/$1"
  AB_PREFETCH=$2 AB_ONLY="2 lanes, whole images" AB_REFERENCES=0 OUT="$OUT/$1" \
    timeout $(( 570 - SECONDS )) python3 benchmarks/diag/jpeg_loader_ab.py 4000 150 2>&1 \
    | grep -E "images/s|Error" | sed "s/^/$1: /" | tee -a "$OUT/summary.txt"
}
for round in 1 2; do
  ab "r$round-prefetch2" 2
  ab "r$round-prefetch4" 4
done
rm -rf "$OUT"/r1-* "$OUT"/r2-*
echo "done at ${SECONDS} s"
