#!/bin/bash
# Session 10, call 6, after merging the status tap, the GPU staging buffers with
# memory_budget and the shutdown fix: (1) every cuda test (W1 generated meanwhile); (2) GPU
# memory, random frames, default and memory_budget=3GiB (issue 16: <= 3 GiB); (3) NVDEC
# start-up, 3 loaders (issue 14: <= 2 s); (4) W1 sequential with the status tap off and on,
# then the ceiling (the tap's cost; the ratio); (5) the NVDEC soak with the tap.
set -u
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt
(timeout 300 python3 -c "from vidloader.bench import prepare_dataset as p; p('W1', 'gpu-quick', data_dir='/tmp/bench-data')" > $OUT/prepare.log 2>&1; echo "prepared rc $?" >> $OUT/prepare.log) &
PREP=$!
VIDLOADER_FAIL_WITHOUT_CUDA=1 timeout 240 python3 -m pytest -q -p no:cacheprovider -m cuda tests/ \
  2>&1 | grep -v "^Svt" > $OUT/cuda_tests.log
grep -E "^FAILED|^ERROR|passed|failed" $OUT/cuda_tests.log | head -12
wait $PREP; tail -1 $OUT/prepare.log
PROBES="random-default random-3GiB" bash benchmarks/diag/memory_probe.sh
echo "== start-up (load $(cut -d' ' -f1-3 /proc/loadavg))"
timeout 80 python3 benchmarks/startup.py --backend nvdec --workers 16 --scale gpu-quick --loaders 3 \
  --data-dir /tmp/bench-data --hang-dump 70 --out $OUT/startup_nvdec.json > $OUT/startup_nvdec.log 2>&1
grep -E "^loader" $OUT/startup_nvdec.log; grep -c "^Thread 0x" $OUT/startup_nvdec.log
seq_run() {  # name backend [env...]
  local name=$1 backend=$2; shift 2
  echo "== $name (load $(cut -d' ' -f1-3 /proc/loadavg))"
  env "$@" timeout 100 python3 -m vidloader.bench run --scale gpu-quick --dataset W1 \
    --data-dir /tmp/bench-data --out $OUT/seq/$name --workers 16 --no-plot --batches 160 \
    --max-seconds 20 --timeout 100 --workload sequential --backends $backend 2>&1 \
    | grep -v "^Svt" | grep -E "^(vidloader|pynvc)"
}
seq_run tap-on vidloader-nvdec VIDLOADER_NVDEC_STATUS_TAP=1
seq_run tap-off vidloader-nvdec VIDLOADER_NVDEC_STATUS_TAP=0
seq_run ceiling pynvc-threads VIDLOADER_NVDEC_STATUS_TAP=1
timeout 90 python3 benchmarks/soak.py --backend nvdec --batches 3000 --every 250 --size 640x360 \
  --batch-size 32 --workers 4 --data-dir /tmp/soak --out $OUT/soak_nvdec.json 2>&1 | grep -v "^Svt" | tail -1
