#!/bin/bash
# Session 15, first call (issue 13): the combo on W4 clips with NVDEC taking over the slow CPU
# unit (session 14's mends, never measured: taken over beyond NVDEC's room, decoded first),
# with the CPU and NVDEC baselines in the same call for a ratio. W4 at the gpu scale, 16
# workers, 8 s warm-up, three 15 s windows per variant; ~7 min, carry .whl.
set -u
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt
timeout 150 python3 -c "from vidloader.bench import prepare_dataset as p; p('W4', 'gpu', data_dir='/tmp/bench-data')" > $OUT/prepare_W4.log 2>&1
echo "prepared rc $?"
timeout 400 python3 -m vidloader.bench._combo_run --workloads W4-clips --scale gpu \
  --variants cpu,nvdec,combo-h0-steal,combo-steal,combo-horizon0 \
  --warmup-s 8 --window-s 15 --windows 3 \
  --out $OUT/combo_w4.json 2>&1 | grep -v "^Svt" > $OUT/combo_w4.log
grep -E "over|summary" $OUT/combo_w4.log
