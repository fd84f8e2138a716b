#!/bin/bash
# Session 12, call 1: the combo on W4 clips at the gpu scale, against the window of staging
# slots. In session11-4 the combo (horizon rule off) spent 86% of its time in waits over
# 100 ms between batches: a batch waiting on one slow CPU unit holds every later one back,
# and both sides idle once the slots are full. Variants: a longer window (prefetch 16),
# the horizon rule on and off, one unit per CPU worker (half the wait of a unit handed out
# behind another), and the CPU alone with the same window (issue 13).
set -u
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt
timeout 150 python3 -c "from vidloader.bench import prepare_dataset as p; p('W4', 'gpu', data_dir='/tmp/bench-data')" > $OUT/prepare_W4.log 2>&1
echo "prepared rc $?"
timeout 420 python3 -m vidloader.bench._combo_run --workloads W4-clips --scale gpu \
  --variants cpu,nvdec,combo,combo-horizon0,combo-pf16,combo-h0-pf16,combo-h0-1unit,cpu-pf16 \
  --warmup-s 6 --window-s 8 --windows 3 \
  --out $OUT/combo_w4.json 2>&1 | grep -v "^Svt" > $OUT/combo_w4.log
grep -E "over" $OUT/combo_w4.log
python3 - $OUT/combo_w4.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))["results"]["W4-clips"]
for k, v in d.items():
    print(f"{k:16s} {v['frames_per_s']:7.0f} min {v['frames_per_s_min']:7.0f} share {v['share_by_executor_timed']} "
          f"gaps {v['batch_gap_ms']} idle {v['combo_cpu_idle_s']} cpu {v.get('cpu_util_pct', 0):.0f}% nvdec {v.get('nvdec_util_pct', 0):.0f}%")
PY
