#!/bin/bash
# Session 13: the NVDEC prime (the process's first NVDEC decode started in the background by
# the loader's constructor, pipeline/_prime.py) on and off, alternated, W1 gpu-quick, 16
# workers, 3 loaders per process; the NVDEC loader cuda tests first.
set -u
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt
VIDLOADER_FAIL_WITHOUT_CUDA=1 timeout 150 python3 -m pytest -q -p no:cacheprovider -m cuda tests/test_loader_nvdec.py 2>&1 | grep -v "^Svt" > $OUT/cuda_tests.log; grep -E "^FAILED|^E  |passed|failed" $OUT/cuda_tests.log | head -8 | cut -c1-300
timeout 200 python3 -c "from vidloader.bench import prepare_dataset as p; p('W1', 'gpu-quick', data_dir='/tmp/bench-data')" > $OUT/prepare_W1.log 2>&1
echo "prepared W1 rc $?"
for tag in on off on2 off2; do
  prime=1; case $tag in off*) prime=0 ;; esac
  VIDLOADER_NVDEC_PRIME=$prime timeout 80 python3 benchmarks/startup.py --backend nvdec --workers 16 \
    --scale gpu-quick --loaders 3 --data-dir /tmp/bench-data --hang-dump 75 --timeline \
    --out $OUT/startup_prime_$tag.json > $OUT/startup_prime_$tag.log 2>&1
  echo "== prime $tag"; grep -E "^loader" $OUT/startup_prime_$tag.log | cut -c1-100
done
