#!/bin/bash
# Written in session 25; run in session 26 as call 3 (benchmarks/results/gpu/session26-3), when
# READER_PROCESSES was 0 and WORKERS_READ_AHEAD off (both are on by default since). Issue 15, one call (~260 s, carry .imgwhl; kind
# nvidia-h200 or nvidia-h100-x1). The default GPU image workers read each task's files in
# Python just before decoding them; session 25 found the packed decode of bytes read beforehand
# 1.5-2.1x the pace of bytes read on the decoding thread (session25-4). WORKERS_READ_AHEAD has
# a thread in each worker read its next task's files while it decodes and augments the
# current one. Here: 2 workers, read-ahead off / on, at the default prefetch (2) and at 4 (more
# tasks queued per worker, so more to read ahead), alternated twice; then 4 workers with it.
set -u
export PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=$PWD/.site/nvidia/cu13/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/gpu.txt"
timeout 120 python3 -c "from vidloader.images._synthetic import write_image_folder as w; w('/tmp/jpeg-ab-x1', num_classes=10, per_class=400)"
ab() {  # label read_ahead(1/0) prefetch workers
  mkdir -p "$OUT/$1"
  AB_READ_AHEAD=$2 AB_PREFETCH=$3 AB_WORKERS=$4 AB_ONLY="2 lanes, whole images" AB_REFERENCES=0 \
    OUT="$OUT/$1" timeout 60 python3 benchmarks/diag/jpeg_loader_ab.py 4000 150 2>&1 \
    | grep -E "images/s|Error" | sed "s/^/$1: /" | tee -a "$OUT/summary.txt"
}
for round in 1 2; do
  ab "r$round-w2-p2-off" 0 2 2
  ab "r$round-w2-p2-on" 1 2 2
  ab "r$round-w2-p4-off" 0 4 2
  ab "r$round-w2-p4-on" 1 4 2
done
ab "w4-p4-on" 1 4 4
echo "done at ${SECONDS} s"
