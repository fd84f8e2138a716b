#!/bin/bash
# Session 15, third combo call (issue 13): is NVDEC short of CPU in the combo? In session15-2
# the machine was 90-95% busy in the combo and NVDEC filled rows at half its pace alone (34%
# busy against 68%), while the take-over rule never fired (NVDEC always had an older unit in
# flight). W4 clips at the gpu scale: cpu and nvdec alone, the combo without the horizon rule
# (16 CPU decoders niced 10, the best so far), the same with the decoders niced 19, and with 12
# CPU decoders; the loader process's threads sampled during the timed windows (--profile).
# ~7 min, carry .whl.
set -u
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt
timeout 150 python3 -c "from vidloader.bench import prepare_dataset as p; p('W4', 'gpu', data_dir='/tmp/bench-data')" > $OUT/prepare_W4.log 2>&1
echo "prepared rc $?"
timeout 420 python3 -m vidloader.bench._combo_run --workloads W4-clips --scale gpu \
  --variants cpu,nvdec,combo-horizon0,combo-h0-nice19,combo-h0-w12 --profile \
  --warmup-s 8 --window-s 12 --windows 3 \
  --out $OUT/combo_w4.json 2>&1 | grep -v "^Svt" > $OUT/combo_w4.log
grep -E "summary" $OUT/combo_w4.log
