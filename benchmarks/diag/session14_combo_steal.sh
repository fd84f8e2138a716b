#!/bin/bash
# Next session's combo call (issue 13), ready to run (~7 min): W4 clips at the gpu scale,
# 15 s windows, CPU alone, NVDEC alone, the combo without the horizon rule (session 12's
# best: 0.76 of the sum), and the same with NVDEC taking over the slow CPU unit that holds
# its batches back (COMBO_STEAL, pipeline/_combo.py), with and without the rule.
set -u
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt
timeout 150 python3 -c "from vidloader.bench import prepare_dataset as p; p('W4', 'gpu', data_dir='/tmp/bench-data')" > $OUT/prepare_W4.log 2>&1
echo "prepared rc $?"
timeout 480 python3 -m vidloader.bench._combo_run --workloads W4-clips --scale gpu \
  --variants cpu,nvdec,combo-horizon0,combo-h0-steal,combo-steal \
  --warmup-s 8 --window-s 15 --windows 3 \
  --out $OUT/combo_w4.json 2>&1 | grep -v "^Svt" > $OUT/combo_w4.log
grep -E "over|summary" $OUT/combo_w4.log
