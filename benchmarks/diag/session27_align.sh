#!/bin/bash
# Session 27, call 2 (issue 15; ~250 s; carry .imgwhl; kind nvidia-h200). Call 1 timed
# nvImageCodec's raw hardware decode at 18,726-19,241 images/s and vidloader's decode_packed
# at 13,562-16,629 on the same bytes. (1) jpeg_packed_gap_probe.py: packed places back to back
# (4-byte aligned with 500x375 images) against aligned to 256 / 4,096 bytes, the raw decode
# beside them, and decode_packed's stages timed. (2) the one-process loader (2 lanes, 2 reader
# processes, as shipped) with places back to back or 256-byte aligned, alternated twice.
set -u
export PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=$PWD/.site/nvidia/cu13/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/gpu.txt"
timeout 120 python3 -c "from vidloader.images._synthetic import write_image_folder as w; w('/tmp/jpeg-ab-x1', num_classes=10, per_class=400)"
timeout 200 python3 benchmarks/diag/jpeg_packed_gap_probe.py 4000 30 2>&1 | grep -v -i "nvjpeg2k\|nvtiff" \
  | tee "$OUT/packed_gap_probe.log" | grep -E "images/s|Error|stages"
ab() {  # label align
  mkdir -p "$OUT/$1"
  AB_ALIGN=$2 AB_ONLY="2 lanes, whole images" AB_REFERENCES=0 OUT="$OUT/$1" \
    timeout $(( 520 - SECONDS )) python3 benchmarks/diag/jpeg_loader_ab.py 4000 150 2>&1 \
    | grep -E "images/s|Error" | sed "s/^/$1: /" | tee -a "$OUT/summary.txt"
}
for round in 1 2; do
  ab "r$round-align1" 1
  ab "r$round-align256" 256
done
rm -rf "$OUT"/r1-* "$OUT"/r2-*
echo "done at ${SECONDS} s"
