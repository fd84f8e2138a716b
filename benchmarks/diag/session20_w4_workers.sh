#!/bin/bash
# Session 20, call 6 (~3 min, carry .whl), issue 16 item 1: W1 ran faster with 8 demux workers
# than 16 (random 410 vs 325, sequential 2,282 vs 2,217 frames/s, H200, session20-4). Does W4
# (Kinetics-like, 340p/720p H.264, GOP 250: the most demux per delivered frame) lose with 8?
# `vidloader bench run` on W4 gpu-quick, vidloader-nvdec, clips-head (SPDL's setting) and
# clips (uniform random 16-frame clips, stride 2), 8 and 16 workers, alternated.
set -u
source "$(dirname "$0")/device_prepare.sh" W4 gpu-quick 120
RES=/tmp/w4-workers; rm -rf "$RES" && mkdir -p "$RES"
bench() {  # workload workers
  timeout 60 python3 -m vidloader.bench run --scale gpu-quick --dataset W4 \
    --data-dir /tmp/bench-data --out "$RES/$1-$2" --workers $2 --no-plot --batches 200 \
    --max-seconds 6 --timeout 50 --workload "$1" --backends vidloader-nvdec 2>&1 | grep -v "^Svt" >> "$OUT/bench.log"
  echo "[$1] workers $2 done at ${SECONDS} s"
}
bench clips-head 8
bench clips-head 16
bench clips 8
bench clips 16
python3 benchmarks/diag/bench_summary.py "$RES" 2>&1 | tee "$OUT/summary.txt"
tar -czf "$OUT/results.tgz" -C "$RES" .
rm -f $OUT/prepare_*.log
echo "done at ${SECONDS} s"
