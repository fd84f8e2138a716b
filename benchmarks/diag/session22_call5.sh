#!/bin/bash
# Session 22, call 5 (~1 min on the machine call 4 left warm, its W3 data in /tmp/bench-data;
# the command line as it ran, run from the repository root): W3-random and W3-stream-long in
# 4 NVDEC processes with the lean conversion.
export PYTHONPATH=$PWD/src:$PWD/.site PYTHONUNBUFFERED=1 && ls /tmp/bench-data | head -3 && for w in W3-random W3-stream-long; do timeout 46 python3 -m vidloader.bench._combo_run --workloads $w --scale gpu --data-dir /tmp/bench-data --workers 16 --variants nvdec-p4 --warmup-s 3 --window-s 4 --windows 3 --out $OUT/$w.json 2>&1 | grep -v "^Svt" > $OUT/$w.log; grep summary $OUT/$w.log | cut -c1-200; done; python3 benchmarks/diag/combo_summary.py $OUT | tee $OUT/summary.txt
