#!/bin/bash
# Session 18, call 4 (~9 min, carry .whl and SPDL's wheels + shim in .peers), issue 16 item 4:
# NVDEC in worker processes (nvdec_processes). The NVDEC loader cuda tests (the new
# processes-equal-in-process test among them); W4-clips-head (SPDL's Kinetics setting) with
# NVDEC in 1 / 2 / 4 / 8 processes (_combo_run windows); SPDL and vidloader-nvdec-p4 through
# `vidloader bench run` on clips-head; uniform random clips (W4-clips), 1 vs 4 processes.
set -u
export PYTHONUNBUFFERED=1
RES=/tmp/procs-bench; rm -rf $RES; mkdir -p $RES
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt
timeout 200 python3 -c "from vidloader.bench import prepare_dataset as p; p('W4', 'gpu', data_dir='/tmp/bench-data')" > /dev/null 2>&1 &
P1=$!
VIDLOADER_FAIL_WITHOUT_CUDA=1 timeout 200 python3 -m pytest -q -p no:cacheprovider -m cuda \
  tests/test_loader_nvdec.py tests/test_nvdec_processes.py 2>&1 | grep -v "^Svt" > $OUT/cuda_tests.log
grep -E "^FAILED|^ERROR|passed|failed" $OUT/cuda_tests.log | head -20 | cut -c1-300
wait $P1; echo "prepared W4 rc $? at ${SECONDS} s"
timeout 220 python3 -m vidloader.bench._combo_run --workloads W4-clips-head --scale gpu \
  --variants nvdec,nvdec-p2,nvdec-p4,nvdec-p8,nvdec-p4-dec8 --warmup-s 4 --window-s 5 --windows 3 \
  --out $RES/head_procs.json 2>&1 | grep -v "^Svt" > $OUT/head_procs.log
grep -E "summary" $OUT/head_procs.log | cut -c1-260
echo "windows done at ${SECONDS} s"
source "$(dirname "$0")/spdl_env.sh"
for b in spdl vidloader-nvdec-p4; do
  [ $SECONDS -gt 470 ] && { echo "bench $b not run: ${SECONDS} s"; continue; }
  timeout 70 python3 -m vidloader.bench run --scale gpu --dataset W4 --data-dir /tmp/bench-data \
    --out $RES/$b --workers 16 --no-plot --batches 200 --max-seconds 8 --timeout 60 \
    --workload clips-head --backends $b 2>&1 | grep -v "^Svt" >> $OUT/bench.log
  grep -E "^\[clips-head\] $b \.\.\." $OUT/bench.log | tail -1
done
if [ $SECONDS -lt 500 ]; then
  timeout 90 python3 -m vidloader.bench._combo_run --workloads W4-clips --scale gpu \
    --variants nvdec,nvdec-p4 --warmup-s 4 --window-s 5 --windows 2 \
    --out $RES/clips_procs.json 2>&1 | grep -v "^Svt" > $OUT/clips_procs.log
  grep -E "summary" $OUT/clips_procs.log | cut -c1-260
fi
tar -czf $OUT/bench.tgz -C $RES .
echo "done at ${SECONDS} s"
