#!/bin/bash
# Session 26, call 4 (issue 15; ~250 s, carry .imgwhl; kind nvidia-h200). After calls 1-3
# the loader runs at 13,000-15,800 images/s against 16,500-17,600 for nvImageCodec's decode
# alone, and DALI's decoder reaches ~25,000. nvImageCodec 0.9's hardware decoder interpolates
# chroma by default (DALI's does not) and preallocates for a batch of one. (1) the cuda test of
# simple chroma upsampling against Pillow, and the tolerance test; (2) the decode alone under
# the options (jpeg_options_probe.py); (3) the loader, in one process (2 readers) and with 2
# GPU workers, default options against ":fancy_upsampling=0" + preallocation, alternated twice.
set -u
export PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=$PWD/.site/nvidia/cu13/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/gpu.txt"
timeout 120 python3 -c "from vidloader.images._synthetic import write_image_folder as w; w('/tmp/jpeg-ab-x1', num_classes=10, per_class=400)"
VIDLOADER_FAIL_WITHOUT_CUDA=1 timeout 90 python3 -m pytest -q -s -p no:cacheprovider -m cuda \
  tests/test_images.py -k "simple_chroma or tolerance" 2>&1 | grep -v -i "nvjpeg2k\|nvtiff" \
  > "$OUT/cuda_tests.log"; grep -E "passed|failed|Error" "$OUT/cuda_tests.log" | tail -4
timeout 150 python3 benchmarks/diag/jpeg_options_probe.py 4000 30 2>&1 | grep -v -i "nvjpeg2k\|nvtiff" \
  | tee "$OUT/options_probe.log" | grep "images/s"
PRE="nvjpeg_hw_decoder:preallocate_batch_size=256 nvjpeg_hw_decoder:preallocate_width_hint=500 nvjpeg_hw_decoder:preallocate_height_hint=375"
ab() {  # label workers options
  mkdir -p "$OUT/$1"
  AB_WORKERS=$2 AB_OPTIONS="$3" AB_ONLY="2 lanes, whole images" AB_REFERENCES=0 OUT="$OUT/$1" \
    timeout 60 python3 benchmarks/diag/jpeg_loader_ab.py 4000 150 2>&1 \
    | grep -E "images/s|Error" | sed "s/^/$1: /" | tee -a "$OUT/summary.txt"
}
for round in 1 2; do
  ab "r$round-inproc-default" 0 ""
  ab "r$round-inproc-simple" 0 ":fancy_upsampling=0 $PRE"
  ab "r$round-w2-default" 2 ""
  ab "r$round-w2-simple" 2 ":fancy_upsampling=0 $PRE"
done
rm -rf "$OUT"/r1-* "$OUT"/r2-*
echo "done at ${SECONDS} s"
