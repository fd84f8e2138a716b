#!/bin/bash
# Session 26, call 10 (issue 15; ~200 s, carry .imgwhl; kind nvidia-h200). A second decode
# thread has never doubled nvImageCodec's decode (16,265 / 16,468 on two threads against
# 16,547 / 17,604 on one, session26-1). nvImageCodec 0.9 shares one nvJPEG handle, and the
# hardware decoder's wait for the previous batch, between decoders of one device with the same
# flags; decoders with different nvJPEG flags get their own. (1) the decode alone on 1-3
# threads with shared or own handles (jpeg_options_probe.py, OPTIONS_SET=handles); (2) the
# loader in one process (2 reader processes, 2 lanes) with its lanes' decoders sharing a
# handle (as shipped) or each with its own (AB_LANE_FLAGS=0,2), alternated twice; 3 lanes own.
set -u
export PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=$PWD/.site/nvidia/cu13/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/gpu.txt"
timeout 120 python3 -c "from vidloader.images._synthetic import write_image_folder as w; w('/tmp/jpeg-ab-x1', num_classes=10, per_class=400)"
OPTIONS_SET=handles timeout 150 python3 benchmarks/diag/jpeg_options_probe.py 4000 30 2>&1 \
  | grep -v -i "nvjpeg2k\|nvtiff" | tee "$OUT/handles_probe.log" | grep "images/s"
ab() {  # label lane-flags variant
  mkdir -p "$OUT/$1"
  AB_LANE_FLAGS="$2" AB_ONLY="$3" AB_REFERENCES=0 OUT="$OUT/$1" \
    timeout 60 python3 benchmarks/diag/jpeg_loader_ab.py 4000 150 2>&1 \
    | grep -E "images/s|Error" | sed "s/^/$1: /" | tee -a "$OUT/summary.txt"
}
for round in 1 2; do
  ab "r$round-shared" "" "2 lanes, whole images"
  ab "r$round-own" "0,2" "2 lanes, whole images"
done
ab "3lanes-own" "0,2,8" "3 lanes, whole images"
rm -rf "$OUT"/r1-* "$OUT"/r2-*
echo "done at ${SECONDS} s"
