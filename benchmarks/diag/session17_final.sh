#!/bin/bash
# Session 17, call 10 (~5 min, carry .whl): the video cuda tests after the session's changes
# (automatic decoder count, memory_budget's plan, the GOP sink's windowed runs, the demux heap
# trim), then W4-clips-head with the GOP sink's runs: NVDEC as shipped (4 decoders there) and
# with 16 decoders.
set -u
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt
timeout 200 python3 -c "from vidloader.bench import prepare_dataset as p; p('W4', 'gpu', data_dir='/tmp/bench-data')" > /dev/null 2>&1 &
P1=$!
VIDLOADER_FAIL_WITHOUT_CUDA=1 timeout 230 python3 -m pytest -q -p no:cacheprovider -m cuda \
  tests/test_combo.py tests/test_loader_nvdec.py tests/test_nvdec.py tests/test_nvdec_concealed.py \
  tests/test_nvdec_gpu_faults.py tests/test_nvtx.py tests/test_reliability.py tests/test_procs.py \
  tests/test_memory_budget.py tests/test_nvdec_logic.py 2>&1 | grep -v "^Svt" > $OUT/cuda_tests.log
grep -E "^FAILED|^ERROR|passed|failed" $OUT/cuda_tests.log | head -20 | cut -c1-400
wait $P1; echo "prepared W4 rc $? at ${SECONDS} s"
timeout 130 python3 -m vidloader.bench._combo_run --workloads W4-clips-head --scale gpu \
  --variants nvdec,nvdec-dec16 --warmup-s 3 --window-s 5 --windows 3 --out $OUT/head_final.json 2>&1 \
  | grep -v "^Svt" > $OUT/head_final.log
grep -E "summary" $OUT/head_final.log | cut -c1-200
echo "done at ${SECONDS} s"
