#!/bin/bash
# Session 16, call 2: (1) the cuda tests of every module a GPU runs (none ran since session
# 15 made CPU workers torch-free, moved image workers and NVTX CPU workers to the "torch" fork
# server); (2) issue 15: is it the files? vidloader's nvImageCodec decoder fed bytes read
# beforehand against paths (the loader's way), one and two threads, then the loader
# (benchmarks/diag/jpeg_paths_probe.py); (3) issue 14: the CPU backend's start-up with 16
# workers with CUDA started first (as a training script that moved its model to the GPU),
# and without. ~6 min, carry .whl and .imgwhl (install both into .site).
set -u
export PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=$PWD/.site/nvidia/cu13/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt
timeout 200 python3 -c "from vidloader.bench import prepare_dataset as p; p('W1', 'gpu-quick', data_dir='/tmp/bench-data')" > $OUT/prepare_W1.log 2>&1 &
P1=$!
VIDLOADER_FAIL_WITHOUT_CUDA=1 timeout 280 python3 -m pytest -q -p no:cacheprovider -m cuda \
  tests/test_combo.py tests/test_images.py tests/test_images_batched.py tests/test_loader_nvdec.py \
  tests/test_nvdec.py tests/test_nvdec_concealed.py tests/test_nvdec_gpu_faults.py tests/test_nvtx.py \
  tests/test_reliability.py tests/test_procs.py 2>&1 | grep -v -i "^Svt\|nvjpeg2k\|nvtiff" > $OUT/cuda_tests.log
grep -E "^FAILED|^ERROR|passed|failed" $OUT/cuda_tests.log | head -20 | cut -c1-400
wait $P1; echo "prepared W1 rc $?"
timeout 150 python3 benchmarks/diag/jpeg_paths_probe.py 4000 4 2>&1 | grep -v -i "nvjpeg2k\|nvtiff\|^\[" > $OUT/jpeg_paths_probe.log; tail -12 $OUT/jpeg_paths_probe.log
for first in "--cuda-first" ""; do
  timeout 90 python3 benchmarks/startup.py --backend cpu --workers 16 --scale gpu-quick --data-dir /tmp/bench-data \
    $first --out $OUT/startup_cpu16${first:+_cudafirst}.json 2>&1 | grep -E "^loader" | cut -c1-200
done
