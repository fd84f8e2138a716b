#!/bin/bash
# Session 10, call 5: the concealed-damage cuda test with its references fixed (session10-4:
# 8 failed against the wrong file's frames), and NVDEC start-up after the shutdown fix (call
# 4's startup run hung in the first loader's shutdown), plain then profiled.
set -u
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt
VIDLOADER_FAIL_WITHOUT_CUDA=1 timeout 120 python3 -m pytest -q -p no:cacheprovider -m cuda \
  tests/test_nvdec_concealed.py tests/test_procs.py 2>&1 | grep -v "^Svt" > $OUT/concealed_tests.log
grep -E "^FAILED|^ERROR|passed|failed" $OUT/concealed_tests.log | head -12
timeout 240 python3 -c "from vidloader.bench import prepare_dataset as p; p('W1', 'gpu-quick', data_dir='/tmp/bench-data')" > /dev/null 2>&1
echo "== start-up (load $(cut -d' ' -f1-3 /proc/loadavg))"
timeout 80 python3 benchmarks/startup.py --backend nvdec --workers 16 --scale gpu-quick --loaders 3 \
  --data-dir /tmp/bench-data --hang-dump 70 --out $OUT/startup_nvdec.json > $OUT/startup_nvdec.log 2>&1
grep -E "^loader" $OUT/startup_nvdec.log; grep -c "^Thread 0x" $OUT/startup_nvdec.log
timeout 80 python3 benchmarks/startup.py --backend nvdec --workers 16 --scale gpu-quick --loaders 2 \
  --data-dir /tmp/bench-data --profile --hang-dump 70 --out $OUT/startup_nvdec_profile.json \
  > $OUT/startup_nvdec_profile.log 2>&1
grep -E "^loader" $OUT/startup_nvdec_profile.log; grep -c "^Thread 0x" $OUT/startup_nvdec_profile.log
