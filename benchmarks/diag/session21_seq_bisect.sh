#!/bin/bash
# Session 21, call 6 (~5 min, carry .whl and .variants/s21), issue 16 item 2: W1 sequential
# through vidloader-nvdec (16 workers) fell from 2,624-2,630 frames/s (session19-11) to
# 2,154-2,282 in session 20's call 4 and 2,182 in this session's call 4 (H200 each). Is it
# the code? The same `vidloader bench run` with src of e4c227a (before session 20, v0),
# 82b5da9 (the one-copy demux, v1) and HEAD (v2), alternated twice, and the raw ceiling once.
set -u
source "$(dirname "$0")/device_prepare.sh" W1 gpu-quick 150
RES=/tmp/seq-bisect; rm -rf "$RES" && mkdir -p "$RES"
HEAD_SRC=$PWD/src
bench() {  # variant-name src-dir backend round
  PYTHONPATH=$2:$PWD/.site timeout 70 python3 -m vidloader.bench run --scale gpu-quick --dataset W1 \
    --data-dir /tmp/bench-data --out "$RES/$1-$3-$4" --workers 16 --no-plot --batches 300 \
    --max-seconds 8 --timeout 60 --workload sequential --backends $3 2>&1 | grep -v "^Svt" >> "$OUT/bench.log"
  echo "$1 $3 round $4 done at ${SECONDS} s"
}
bench v2 $HEAD_SRC pynvc-threads 1
for r in 1 2; do
  bench v0 $PWD/.variants/s21/v0/src vidloader-nvdec $r
  bench v2 $HEAD_SRC vidloader-nvdec $r
  bench v1 $PWD/.variants/s21/v1/src vidloader-nvdec $r
done
python3 benchmarks/diag/bench_summary.py "$RES" 2>&1 | tee "$OUT/summary.txt"
tar -czf "$OUT/bench.tgz" -C "$RES" .
rm -f $OUT/prepare_*.log
echo "done at ${SECONDS} s"
