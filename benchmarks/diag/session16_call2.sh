#!/bin/bash
# Session 16, call 2: (1) the cuda tests of the video modules (none ran since session 15 made
# CPU workers torch-free and moved NVTX CPU workers to the "torch" fork server); (2) issue 14:
# the CPU backend's start-up with 16 workers, CUDA started first (as a training script that
# moved its model to the GPU) and not, with the first batch's decode floor; (3) issue 13: W1
# uniform random frames, CPU alone, NVDEC alone, both at once in two processes, the combo
# (call 1 found two independent loaders get 0.72 of cpu + nvdec on W4). ~8 min, carry .whl.
set -u
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt
timeout 200 python3 -c "from vidloader.bench import prepare_dataset as p; p('W1', 'gpu-quick', data_dir='/tmp/bench-data')" > $OUT/prepare_W1.log 2>&1 &
P1=$!
VIDLOADER_FAIL_WITHOUT_CUDA=1 timeout 200 python3 -m pytest -q -p no:cacheprovider -m cuda \
  tests/test_combo.py tests/test_loader_nvdec.py tests/test_nvdec.py tests/test_nvdec_concealed.py \
  tests/test_nvdec_gpu_faults.py tests/test_nvtx.py tests/test_reliability.py tests/test_procs.py \
  2>&1 | grep -v "^Svt" > $OUT/cuda_tests.log
grep -E "^FAILED|^ERROR|passed|failed" $OUT/cuda_tests.log | head -20 | cut -c1-400
wait $P1; echo "prepared W1 rc $?"
for first in "--cuda-first" ""; do
  timeout 90 python3 benchmarks/startup.py --backend cpu --workers 16 --scale gpu-quick --data-dir /tmp/bench-data \
    $first --floor --out $OUT/startup_cpu16${first:+_cudafirst}.json 2>&1 | grep -E "^loader|floor|CUDA" | cut -c1-220
done
timeout 300 python3 -m vidloader.bench._combo_run --workloads W1-random --scale gpu-quick \
  --variants cpu,nvdec,cpu+nvdec,combo --warmup-s 6 --window-s 8 --windows 3 --pair-slack-s 15 \
  --out $OUT/combo_pair_w1.json 2>&1 | grep -v "^Svt" > $OUT/combo_pair_w1.log
grep -E "summary|/ \(" $OUT/combo_pair_w1.log
