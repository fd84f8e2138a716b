#!/bin/bash
# Session 9, call 1: every cuda test; the image benchmark after in-memory units (issue 15:
# CIFAR 20x where 200x is the target); where the GPU JPEG pipeline's time goes; where the
# NVDEC loader's GPU memory goes (issue 16). nvImageCodec and nvJPEG installed into .site.
set -u
export LD_LIBRARY_PATH=$PWD/.site/nvidia/cu13/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt
VIDLOADER_FAIL_WITHOUT_CUDA=1 timeout 200 python3 -m pytest -q -p no:cacheprovider -m cuda tests/ 2>&1 | grep -v "^Svt" > $OUT/cuda_tests.log; grep -E "^FAILED|^E  |passed|failed" $OUT/cuda_tests.log | head -20 | cut -c1-300
timeout 120 python3 -m vidloader bench images --workload cifar,jpeg --images 6000 --batches 40 --cpu-batches 10 --out $OUT > $OUT/images.log 2>&1; grep -v -i "nvjpeg2k\|nvtiff\|^\[" $OUT/images.log | tail -14
timeout 90 python3 benchmarks/diag/jpeg_stages.py 6000 20 2>&1 | grep -v -i "nvjpeg2k\|nvtiff" > $OUT/jpeg_stages.log; tail -14 $OUT/jpeg_stages.log
timeout 100 python3 -c "from vidloader.bench import prepare_dataset as p; p('W1', 'gpu-quick', data_dir='/tmp/bench-data')" > /dev/null 2>&1
timeout 100 python3 benchmarks/diag/gpu_memory_probe.py 60 2>&1 | grep -v "^Svt" > $OUT/gpu_memory.log; tail -40 $OUT/gpu_memory.log | cut -c1-200
