#!/bin/bash
# Session 9, call 6: every cuda test (NVDEC frames copied once into their GOP's stacked rows;
# the GPU-fault test prints what keeps a leftover slot alive); where the NVDEC loader's GPU
# memory goes after that; W1 sequential against the raw NVDEC ceiling (issue 16).
set -u
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt
VIDLOADER_FAIL_WITHOUT_CUDA=1 timeout 200 python3 -m pytest -q -p no:cacheprovider -m cuda tests/ 2>&1 | grep -v "^Svt" > $OUT/cuda_tests.log; grep -E "^FAILED|passed|failed" $OUT/cuda_tests.log | head; grep -A12 "left alive" $OUT/cuda_tests.log | cut -c1-300
timeout 100 python3 -c "from vidloader.bench import prepare_dataset as p; p('W1', 'gpu-quick', data_dir='/tmp/bench-data')" > /dev/null 2>&1
timeout 100 python3 benchmarks/diag/gpu_memory_probe.py 60 2>&1 | grep -v "^Svt" > $OUT/gpu_memory.log; head -24 $OUT/gpu_memory.log | cut -c1-160
BENCH_STEPS=sequential OUT=$OUT timeout 190 bash benchmarks/gpu_run.sh > $OUT/seq.log 2>&1; grep -E "\] (vidloader-nvdec|pynvc-threads)" $OUT/seq.log | cut -c1-250
