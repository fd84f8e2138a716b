#!/bin/bash
# Session 25, issue 15, one call (~220 s, carry .imgwhl): the packed in-process pool's decode
# lanes were idle 12-23% of the time in session25-3's profile. Does a deeper prefetch (more
# batches in flight for the lanes) fill them? In-process 2 and 3 lanes and 2 GPU workers, the
# loader's prefetch 2 (default) against 4, alternated (120 batches of 256 each).
set -u
export PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=$PWD/.site/nvidia/cu13/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/gpu.txt"
ab() {  # label prefetch workers variant
  mkdir -p "$OUT/$1"
  AB_PREFETCH=$2 AB_WORKERS=$3 AB_ONLY="$4" AB_REFERENCES=0 OUT="$OUT/$1" \
    timeout 45 python3 benchmarks/diag/jpeg_loader_ab.py 4000 120 2>&1 \
    | grep -E "images/s|Error" | sed "s/^/$1: /" | tee -a "$OUT/summary.txt"
}
for round in 1 2; do
  ab "r$round-2lanes-p2" 2 0 "2 lanes, whole images"
  ab "r$round-2lanes-p4" 4 0 "2 lanes, whole images"
  ab "r$round-3lanes-p4" 4 0 "3 lanes, whole images"
done
ab "workers2-p2" 2 2 "2 lanes, whole images"
ab "workers2-p4" 4 2 "2 lanes, whole images"
echo "done at ${SECONDS} s"
