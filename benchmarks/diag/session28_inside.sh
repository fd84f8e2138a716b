#!/bin/bash
# WRITTEN IN SESSION 27, NEVER RUN: overtaken in session 28 (the decode inside the loader is
# nvJPEG's now; see docs/images-performance.md, "Session 28"). Issue 15, one call (~320 s; carry .imgwhl; kind
# nvidia-h200). Session 27 timed the one-process loader's decode calls at 19-24 ms a batch
# with one lane (session27-7) and the same call alone at 13.7-16.9 ms (stage sums, session27-2)
# on another machine: is the decode slower inside the loader, and by how much, on one machine?
# (1) jpeg_packed_gap_probe.py: decode_packed alone, stage by stage; (2) jpeg_loader_timeline.py,
# one and two lanes at prefetch 2, with the JPEG decoder's utilisation from nvidia-smi;
# (3) the decode lanes' stream priority 0 against -1 (11,853 / 12,616 against 10,815 / 12,131 in
# session27-8: two pairs), three more pairs alternated.
set -u
export PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=$PWD/.site/nvidia/cu13/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/gpu.txt"
timeout 100 python3 -c "from vidloader.images._synthetic import write_image_folder as w; w('/tmp/jpeg-ab-x1', num_classes=10, per_class=400)"
timeout 90 python3 benchmarks/diag/jpeg_packed_gap_probe.py 4000 30 2>&1 | grep -v -i "nvjpeg2k\|nvtiff" \
  | tee "$OUT/packed_gap_probe.log" | grep -E "images/s|Error|stages"
TIMELINE_ONLY="2 lanes, prefetch 2;1 lane, prefetch 2" timeout 110 python3 benchmarks/diag/jpeg_loader_timeline.py 4000 150 2>&1 \
  | grep -v -i "nvjpeg2k\|nvtiff" | tee "$OUT/timeline.log" | grep -E "images/s|Error"
ab() {  # label priority
  mkdir -p "$OUT/$1"
  AB_DECODE_PRIORITY=$2 AB_ONLY="2 lanes, whole images" AB_REFERENCES=0 OUT="$OUT/$1" \
    timeout $(( 575 - SECONDS )) python3 benchmarks/diag/jpeg_loader_ab.py 4000 150 2>&1 \
    | grep -E "images/s|Error" | sed "s/^/$1: /" | tee -a "$OUT/summary.txt"
}
for round in 1 2 3; do
  [ $SECONDS -lt 520 ] && ab "r$round-priority0" 0
  [ $SECONDS -lt 540 ] && ab "r$round-priority-1" -1
done
rm -rf "$OUT"/r?-*
echo "done at ${SECONDS} s"
