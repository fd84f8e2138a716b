#!/bin/bash
# Session 10, call 2. Call 1 (session10-1) gave W1 sequential 1,043 frames/s against the raw
# ceiling's 2,539 (session 9: 2,111-2,317 against 2,840-2,998) and NVDEC on W4 clips 910
# (session 8: 1,601-2,195), with neither the CPU nor NVDEC busy. Is it the code since session
# 9 call 7 or the machine? The same bench, this call, with the source of 17c1560 (the tree
# session9-7 measured, carried in old/) and with HEAD, in turn, then the ceiling. Also: the
# GPU-fault tests after the staging-list fix, NVDEC start-up profiled (issue 14), NVDEC soak.
set -u
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt
(uptime; ps -eo pid,pcpu,rss,etime,comm --sort=-pcpu | head -15; nvidia-smi) > $OUT/machine_before.txt
timeout 110 python3 -c "from vidloader.bench import prepare_dataset as p; p('W1', 'gpu-quick', data_dir='/tmp/bench-data')" > /dev/null 2>&1
SITE=$PWD/.site
seq_run() {  # name source-root backend
  echo "== $1 (load $(cut -d' ' -f1-3 /proc/loadavg))"
  PYTHONPATH=$2/src:$SITE timeout 120 python3 -m vidloader.bench run --scale gpu-quick --dataset W1 \
    --data-dir /tmp/bench-data --out $OUT/seq/$1 --workers 16 --no-plot --batches 160 \
    --max-seconds 20 --timeout 120 --workload sequential --backends $3 2>&1 | grep -v "^Svt" | grep -E "^\[|^vidloader|^pynvc"
}
seq_run head-1 $PWD vidloader-nvdec
seq_run old-17c1560 $PWD/old vidloader-nvdec
seq_run head-2 $PWD vidloader-nvdec
seq_run ceiling $PWD pynvc-threads
VIDLOADER_FAIL_WITHOUT_CUDA=1 timeout 150 python3 -m pytest -q -p no:cacheprovider -m cuda \
  tests/test_nvdec_gpu_faults.py 2>&1 | grep -v "^Svt" > $OUT/fault_tests.log
grep -E "^FAILED|passed|failed" $OUT/fault_tests.log | head
timeout 100 python3 benchmarks/startup.py --backend nvdec --workers 16 --scale gpu-quick --loaders 3 --data-dir /tmp/bench-data \
  --profile --out $OUT/startup_nvdec.json 2>&1 | grep -E "^loader"
timeout 150 python3 benchmarks/soak.py --backend nvdec --batches 4000 --every 250 --size 640x360 \
  --batch-size 32 --workers 4 --data-dir /tmp/soak --out $OUT/soak_nvdec.json 2>&1 | grep -v "^Svt" | tail -3
