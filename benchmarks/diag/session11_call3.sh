#!/bin/bash
# Session 11, call 3: (1) cuda tests touched by this session (GOP-level skips on NVDEC, the
# separation pool's counting, the combo), while the datasets generate; (2) NVDEC start-up,
# 16 workers on W1, with the first batch's parts counted as one batch (new) against counted
# as units (PARTS_COUNT_AS_ROWS=False, as before), in one call (issue 14); (3) the combo on
# W4 clips at the gpu scale with units of a whole batch (combo-unit8) beside the default.
set -u
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt
prep() { timeout 220 python3 -c "from vidloader.bench import prepare_dataset as p; p('$1', '$2', data_dir='/tmp/bench-data')" > $OUT/prepare_$1.log 2>&1; echo "prepared $1 rc $?" >> $OUT/prepare_$1.log; }
prep W1 gpu-quick & P1=$!
prep W4 gpu & P4=$!
VIDLOADER_FAIL_WITHOUT_CUDA=1 timeout 200 python3 -m pytest -q -p no:cacheprovider -m cuda \
  tests/test_nvdec_concealed.py tests/test_loader_nvdec.py tests/test_combo.py tests/test_nvdec_logic.py \
  2>&1 | grep -v "^Svt" > $OUT/cuda_tests.log
grep -E "^FAILED|passed|failed|error" $OUT/cuda_tests.log | head
wait $P1 $P4; tail -qn1 $OUT/prepare_W1.log $OUT/prepare_W4.log
for tag in new old; do
  patch=""; [ $tag = old ] && patch="--patch vidloader.pipeline._pool.PARTS_COUNT_AS_ROWS=False"
  timeout 45 python3 benchmarks/startup.py --backend nvdec --workers 16 --scale gpu-quick --loaders 3 \
    --data-dir /tmp/bench-data --hang-dump 40 $patch --out $OUT/startup_nvdec_$tag.json > $OUT/startup_nvdec_$tag.log 2>&1
  echo "== $tag"; grep -E "^loader" $OUT/startup_nvdec_$tag.log
done
timeout 230 python3 -m vidloader.bench._combo_run --workloads W4-clips --scale gpu \
  --variants cpu,nvdec,combo,combo-unit8 --warmup-s 10 --window-s 12 --windows 3 \
  --out $OUT/combo_w4.json 2>&1 | grep -v "^Svt" > $OUT/combo_w4.log
grep -E "over|frames_per_s" $OUT/combo_w4.log | cut -c1-200
