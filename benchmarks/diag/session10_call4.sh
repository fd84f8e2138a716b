#!/bin/bash
# Session 10, call 4: (1) every cuda test after merging the NVDEC status tap (issue 17: its
# 8-case cuda test has never run on a GPU), the damage probe with the tap on and off; (2) the
# tap's cost: W1 sequential with VIDLOADER_NVDEC_STATUS_TAP=0 and on, in turn; (3) NVDEC
# start-up, 3 loaders (issue 14: <= 2 s with 16 workers); (4) W1 sequential with 8 and 16
# units queued on the decoders (issue 16: 0.77-0.87 of the ceiling, NVDEC 74-84% busy).
set -u
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt
VIDLOADER_FAIL_WITHOUT_CUDA=1 timeout 230 python3 -m pytest -q -p no:cacheprovider -m cuda tests/ \
  2>&1 | grep -v "^Svt" > $OUT/cuda_tests.log
grep -E "^FAILED|^ERROR|passed|failed" $OUT/cuda_tests.log | head -12
timeout 60 python3 benchmarks/diag/nvdec_damage_probe.py $OUT/nvdec_damage.json > $OUT/nvdec_damage.log 2>&1
tail -4 $OUT/nvdec_damage.log | cut -c1-240
timeout 110 python3 -c "from vidloader.bench import prepare_dataset as p; p('W1', 'gpu-quick', data_dir='/tmp/bench-data')" > /dev/null 2>&1
seq_run() {  # name [env...]
  local name=$1; shift
  echo "== $name (load $(cut -d' ' -f1-3 /proc/loadavg))"
  env "$@" timeout 100 python3 -m vidloader.bench run --scale gpu-quick --dataset W1 \
    --data-dir /tmp/bench-data --out $OUT/seq/$name --workers 16 --no-plot --batches 160 \
    --max-seconds 20 --timeout 100 --workload sequential --backends vidloader-nvdec 2>&1 \
    | grep -v "^Svt" | grep -E "^vidloader"
}
seq_run tap-off VIDLOADER_NVDEC_STATUS_TAP=0
seq_run tap-on VIDLOADER_NVDEC_STATUS_TAP=1
echo "== start-up (load $(cut -d' ' -f1-3 /proc/loadavg))"
timeout 80 python3 benchmarks/startup.py --backend nvdec --workers 16 --scale gpu-quick --loaders 3 \
  --data-dir /tmp/bench-data --hang-dump 70 --out $OUT/startup_nvdec.json > $OUT/startup_nvdec.log 2>&1
grep -E "^loader" $OUT/startup_nvdec.log; grep -c "^Thread 0x" $OUT/startup_nvdec.log
echo "== sequential by units_decoding (load $(cut -d' ' -f1-3 /proc/loadavg))"
timeout 130 python3 -m vidloader.bench sweep --out $OUT/sweep_units.json --repeat 3 --batches 60 \
  --no-ceiling --configs sequential:16:units_decoding=8,sequential:16:units_decoding=16 \
  2>&1 | grep -v "^Svt" > $OUT/sweep_units.log
tail -4 $OUT/sweep_units.log | cut -c1-220
