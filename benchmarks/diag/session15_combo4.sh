#!/bin/bash
# Session 15, fourth combo call (issue 13): session15-3's profile found the loader's process
# busy with two things beside its NVDEC decoder threads: the combo's main thread asking every
# CPU worker whether it lives after each 2 ms wait (25% of its samples), and the bench's
# monitor walking every process of the machine every 200 ms (its thread busy ~60%). Both
# mended; this call measures them, each A/B in the same call: nvdec alone with the old monitor
# walk (nvdec-tree0), and the combo with both as before (combo-h0-old). W4 clips at the gpu
# scale, 16 workers, 8 s warm-up, three 12 s windows, --profile. ~6 min, carry .whl.
set -u
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt
timeout 150 python3 -c "from vidloader.bench import prepare_dataset as p; p('W4', 'gpu', data_dir='/tmp/bench-data')" > $OUT/prepare_W4.log 2>&1
echo "prepared rc $?"
timeout 400 python3 -m vidloader.bench._combo_run --workloads W4-clips --scale gpu \
  --variants cpu,nvdec,nvdec-tree0,combo-horizon0,combo-h0-old --profile \
  --warmup-s 8 --window-s 12 --windows 3 \
  --out $OUT/combo_w4.json 2>&1 | grep -v "^Svt" > $OUT/combo_w4.log
grep -E "summary" $OUT/combo_w4.log
