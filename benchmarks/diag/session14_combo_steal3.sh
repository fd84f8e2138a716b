#!/bin/bash
# Session 14, third combo call (issue 13): CPU alone, NVDEC alone and the combo with NVDEC
# taking over the slow CPU unit, now beyond NVDEC's room and decoded before its units not
# started yet (session14-4: 0 steals, NVDEC at its room with units waiting for staging
# buffers). W4 clips at the gpu scale, 12 s windows, ~5 min, carry .whl.
set -u
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt
timeout 150 python3 -c "from vidloader.bench import prepare_dataset as p; p('W4', 'gpu', data_dir='/tmp/bench-data')" > $OUT/prepare_W4.log 2>&1
echo "prepared rc $?"
timeout 330 python3 -m vidloader.bench._combo_run --workloads W4-clips --scale gpu \
  --variants cpu,nvdec,combo-h0-steal \
  --warmup-s 8 --window-s 12 --windows 3 \
  --out $OUT/combo_w4.json 2>&1 | grep -v "^Svt" > $OUT/combo_w4.log
grep -E "over|summary" $OUT/combo_w4.log
