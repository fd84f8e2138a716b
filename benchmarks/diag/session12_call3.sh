#!/bin/bash
# Session 12, call 3: the combo on W4 clips at the gpu scale with 15 s windows (in call 1,
# 8 s windows were shorter than the CPU backend's bursts: its windows ranged 495-1,282
# frames/s). In the combo the CPU side delivered about what it does alone while NVDEC's
# share fell to half of NVDEC alone (NVDEC 27% busy against 52%): the variants give NVDEC
# more demux workers (8 and 16 instead of 4), horizon rule off (issue 13).
set -u
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt
timeout 150 python3 -c "from vidloader.bench import prepare_dataset as p; p('W4', 'gpu', data_dir='/tmp/bench-data')" > $OUT/prepare_W4.log 2>&1
echo "prepared rc $?"
timeout 420 python3 -m vidloader.bench._combo_run --workloads W4-clips --scale gpu \
  --variants cpu,nvdec,combo-horizon0,combo-h0-div2,combo-h0-div1 \
  --warmup-s 8 --window-s 15 --windows 3 \
  --out $OUT/combo_w4.json 2>&1 | grep -v "^Svt" > $OUT/combo_w4.log
grep -E "over" $OUT/combo_w4.log
python3 - $OUT/combo_w4.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))["results"]["W4-clips"]
for k, v in d.items():
    print(f"{k:16s} {v['frames_per_s']:7.0f} windows {[round(x) for x in v['frames_per_s_windows']]} share {v['share_by_executor_timed']} "
          f"idle {v['combo_cpu_idle_s']} cpu {v.get('cpu_util_pct', 0):.0f}% nvdec {v.get('nvdec_util_pct', 0):.0f}%")
PY
