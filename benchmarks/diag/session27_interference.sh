#!/bin/bash
# Session 27, call 8 (issue 15; ~260 s; carry .imgwhl). (1) jpeg_interference_probe.py: the
# hardware decode alone and beside the augmentation (at the same or a lower stream priority),
# a pure-Python loop, or GPU matrix products: what makes each decode call take 19-24 ms in the
# loader against ~12 alone (session27-7, -2). (2) the one-process loader with its decode lanes
# at stream priority 0 (as shipped) or -1, alternated twice.
set -u
export PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=$PWD/.site/nvidia/cu13/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/gpu.txt"
timeout 120 python3 -c "from vidloader.images._synthetic import write_image_folder as w; w('/tmp/jpeg-ab-x1', num_classes=10, per_class=400)"
timeout 150 python3 benchmarks/diag/jpeg_interference_probe.py 4000 30 2>&1 | grep -v -i "nvjpeg2k\|nvtiff" \
  | tee "$OUT/interference_probe.log" | grep -E "images/s|Error"
ab() {  # label priority
  mkdir -p "$OUT/$1"
  AB_DECODE_PRIORITY=$2 AB_ONLY="2 lanes, whole images" AB_REFERENCES=0 OUT="$OUT/$1" \
    timeout $(( 330 - SECONDS )) python3 benchmarks/diag/jpeg_loader_ab.py 4000 150 2>&1 \
    | grep -E "images/s|Error" | sed "s/^/$1: /" | tee -a "$OUT/summary.txt"
}
for round in 1 2; do
  [ $SECONDS -lt 300 ] && ab "r$round-priority0" 0
  [ $SECONDS -lt 300 ] && ab "r$round-priority-1" -1
done
rm -rf "$OUT"/r1-* "$OUT"/r2-*
echo "done at ${SECONDS} s"
