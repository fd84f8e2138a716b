#!/bin/bash
# Session 14, third combo call (issue 13), sized to the session's last 200 s of device time:
# the combo with NVDEC taking over the slow CPU unit alone, now beyond NVDEC's room and decoded
# before its units not started yet (session14-4: 0 steals, NVDEC at its room with units
# waiting for staging buffers): do steals happen now? W4 clips at the gpu scale, 10 s windows,
# ~2.5 min, carry .whl. (No CPU or NVDEC baseline in this call: no ratio from it.)
set -u
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt
timeout 120 python3 -c "from vidloader.bench import prepare_dataset as p; p('W4', 'gpu', data_dir='/tmp/bench-data')" > $OUT/prepare_W4.log 2>&1
echo "prepared rc $?"
timeout 150 python3 -m vidloader.bench._combo_run --workloads W4-clips --scale gpu \
  --variants combo-h0-steal \
  --warmup-s 6 --window-s 10 --windows 3 \
  --out $OUT/combo_w4.json 2>&1 | grep -v "^Svt" > $OUT/combo_w4.log
grep -E "over|summary" $OUT/combo_w4.log
