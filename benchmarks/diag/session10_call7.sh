#!/bin/bash
# Session 10, call 7 (last): (1) the GPU-fault tests with the 1 MiB bound; (2) the combo on W4
# clips with its parts in one call (issue 13); (3) GPU memory with memory_budget=3GiB as now
# planned (12 decoders; session10-6 measured the old 16-decoder plan); (4) NVDEC start-up
# profiled (issue 14: 2.98-4.05 s in session10-6; the profiled run used to hang in shutdown).
set -u
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt
(timeout 300 python3 -c "from vidloader.bench import prepare_dataset as p; p('W1', 'gpu-quick', data_dir='/tmp/bench-data')" > $OUT/prepare.log 2>&1; echo "prepared rc $?" >> $OUT/prepare.log) &
PREP=$!
VIDLOADER_FAIL_WITHOUT_CUDA=1 timeout 120 python3 -m pytest -q -p no:cacheprovider -m cuda \
  tests/test_nvdec_gpu_faults.py 2>&1 | grep -v "^Svt" > $OUT/fault_tests.log
grep -E "^FAILED|passed|failed" $OUT/fault_tests.log | head
timeout 200 python3 -m vidloader.bench._combo_run --workloads W4-clips --scale gpu-quick \
  --variants cpu,nvdec,combo --warmup-s 6 --out $OUT/combo_w4.json 2>&1 | grep -v "^Svt" > $OUT/combo_w4.log
grep -E "over|frames_per_s" $OUT/combo_w4.log | cut -c1-260
wait $PREP; tail -1 $OUT/prepare.log
PROBES="random-3GiB" bash benchmarks/diag/memory_probe.sh
timeout 80 python3 benchmarks/startup.py --backend nvdec --workers 16 --scale gpu-quick --loaders 2 \
  --data-dir /tmp/bench-data --profile --hang-dump 70 --out $OUT/startup_nvdec_profile.json \
  > $OUT/startup_nvdec_profile.log 2>&1
grep -E "^loader" $OUT/startup_nvdec_profile.log; grep -c "^Thread 0x" $OUT/startup_nvdec_profile.log
