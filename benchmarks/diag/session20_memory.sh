#!/bin/bash
# Session 20 (~8 min, carry .whl and .variants/before: src/vidloader as committed before the
# change), issue 16 item 1 (host memory on uniform random frames). Demux workers now write
# each packet once, from FFmpeg's buffer into their part's shared-memory segment, instead of
# into bytes, a bundle's array and then the segment (2.2-2.3x a part's bytes at a worker's
# peak on the 2-core machine, 1.25x after), and scan for start codes in 4 MiB windows.
# First the NVDEC loader's cuda tests; then gpu_memory_probe.py on W1 gpu-quick (1080p, batch
# 128 at 224^2, 16 decoders), whose host peak now also counts the segments sent but not yet
# mapped: uniform random frames before/after with 16 demux workers, after with 8 and 4, and
# sequential reading before/after with 16 (the demux-heaviest order: frames/s must hold).
set -u
source "$(dirname "$0")/device_prepare.sh" W1 gpu-quick 150 &
P1=$!
VIDLOADER_FAIL_WITHOUT_CUDA=1 timeout 200 python3 -m pytest -q -p no:cacheprovider -m cuda \
  tests/test_loader_nvdec.py tests/test_nvdec.py 2>&1 | grep -v "^Svt" > $OUT/cuda_tests.log
grep -E "^FAILED|^ERROR|passed|failed" $OUT/cuda_tests.log | head -20 | cut -c1-300
wait $P1
probe() {  # tag code-folder sampler workers
  PYTHONPATH=$PWD/$2:$PWD/.site timeout 90 python3 benchmarks/diag/gpu_memory_probe.py \
    --sampler $3 --workers $4 --batches 50 --warmup 10 --no-history --tag $1 > $OUT/probe-$1.log 2>&1
  echo "$1 rc $? at ${SECONDS} s: $(grep -E '^frames_per_s|^smi_loader_peak_gib|^host_peak_pss_gib' $OUT/probe-$1.log | tr '\n' ' ')"
}
probe rnd-after-16 src random 16
probe rnd-before-16 .variants/before random 16
probe rnd-after-8 src random 8
probe rnd-after-4 src random 4
probe seq-after-16 src sequential 16
probe seq-before-16 .variants/before sequential 16
probe rnd-after-16b src random 16
echo "done at ${SECONDS} s"
