#!/bin/bash
# Session 12, call 4, combo part: W4 clips at the gpu scale, the horizon rule on, with a long
# window of staging slots (prefetch 32 and 64: 204 and 332 batches against 84), and with one
# unit per CPU worker too (half the CPU's latency). In call 3 (15 s windows) the combo without the rule
# reached 0.76 of the sum with its CPU side idle 17.6 s for want of units and NVDEC 36%
# busy against 72% alone: NVDEC catches up with the CPU's units and waits behind them, and
# the rule, which keeps the CPU far enough ahead, needs a window longer than NVDEC's pace
# times the CPU's latency (~900 rows/s x 1-2 s x 1.5: 170-340 batches of 8 clips) (issue 13).
# Correction after the run: 900 is frames/s; a row is a 16-frame clip, so 56 rows/s, and the
# horizon is 10-21 batches, inside the 84-slot window: the premise of this call was wrong.
set -u
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt
timeout 150 python3 -c "from vidloader.bench import prepare_dataset as p; p('W4', 'gpu', data_dir='/tmp/bench-data')" > $OUT/prepare_W4.log 2>&1
echo "prepared rc $?"
timeout 330 python3 -m vidloader.bench._combo_run --workloads W4-clips --scale gpu \
  --variants cpu,nvdec,combo-pf32,combo-pf64,combo-pf64-1unit \
  --warmup-s 8 --window-s 10 --windows 3 \
  --out $OUT/combo_w4.json 2>&1 | grep -v "^Svt" > $OUT/combo_w4.log
grep -E "over" $OUT/combo_w4.log
python3 - $OUT/combo_w4.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))["results"]["W4-clips"]
for k, v in d.items():
    print(f"{k:16s} {v['frames_per_s']:7.0f} windows {[round(x) for x in v['frames_per_s_windows']]} share {v['share_by_executor_timed']} "
          f"idle {v['combo_cpu_idle_s']} cpu {v.get('cpu_util_pct', 0):.0f}% nvdec {v.get('nvdec_util_pct', 0):.0f}% host {v.get('peak_host_memory_bytes', 0)/2**30:.2f} GiB")
PY
