#!/bin/bash
# Session 18, call 11 (~9 min, carry .whl and SPDL's wheels + shim in .peers), issue 16 item 4:
# the NVDEC loader cuda tests after the session's changes; then `vidloader bench run` on
# W4 (gpu scale) for SPDL, vidloader-nvdec (one process) and vidloader-nvdec-p12 (NVDEC in 12
# worker processes of 2 decoder threads), each in its own command, one call: clips-head (SPDL's
# Kinetics setting) and uniform random clips.
set -u
export PYTHONUNBUFFERED=1
DEADLINE=${DEADLINE:-520}
RES=/tmp/final-bench; rm -rf $RES; mkdir -p $RES
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt
timeout 200 python3 -c "from vidloader.bench import prepare_dataset as p; p('W4', 'gpu', data_dir='/tmp/bench-data')" > /dev/null 2>&1 &
P1=$!
VIDLOADER_FAIL_WITHOUT_CUDA=1 timeout 150 python3 -m pytest -q -p no:cacheprovider -m cuda \
  tests/test_loader_nvdec.py tests/test_nvdec_processes.py 2>&1 | grep -v "^Svt" > $OUT/cuda_tests.log
grep -E "^FAILED|^ERROR|passed|failed" $OUT/cuda_tests.log | head -20 | cut -c1-300
wait $P1; echo "prepared W4 rc $? at ${SECONDS} s"
source "$(dirname "$0")/spdl_env.sh"
bench() {  # workload backend
  local left=$((DEADLINE - SECONDS))
  if [ "$left" -lt 50 ]; then echo "[$1] $2 not run: ${left} s left" | tee -a $OUT/bench.log; return; fi
  timeout 80 python3 -m vidloader.bench run --scale gpu --dataset W4 --data-dir /tmp/bench-data \
    --out $RES/$2 --workers 16 --no-plot --batches 300 --max-seconds 10 --timeout 70 \
    --workload $1 --backends $2 2>&1 | grep -v "^Svt" >> $OUT/bench.log
  grep -E "^\[$1\] $2 \.\.\." $OUT/bench.log | tail -1
}
for b in spdl vidloader-nvdec vidloader-nvdec-p12; do bench clips-head $b; done
for b in vidloader-nvdec-p12 spdl vidloader-nvdec; do bench clips $b; done
python3 benchmarks/diag/bench_summary.py $RES > $OUT/summary.txt 2>&1; tail -12 $OUT/summary.txt
tar -czf $OUT/bench.tgz -C $RES .
echo "done at ${SECONDS} s"
