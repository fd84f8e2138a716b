#!/bin/bash
# Written in session 24; run in session 25 (benchmarks/results/gpu/session25-1). Issue 15, one call (~250 s, carry .imgwhl; LD_LIBRARY_PATH
# set below): (1) the image cuda tests, now with an in-process case of the tolerance test (the
# phased lanes with real nvImageCodec: not yet run on a GPU); (2) with the lanes taking the
# GIL once a file (session 24: +17-24% in one process), do three lanes now beat two (they did
# not before, session 13)? Alternated twice; (3) the default 2 GPU workers against 4, and
# nvImageCodec's decode alone, for reference; (4) where each thread of the in-process pool
# spends its time now (the stack sampler, 2 ms; its summary lands in profile/'s JSON).
set -u
export PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=$PWD/.site/nvidia/cu13/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/gpu.txt"
VIDLOADER_FAIL_WITHOUT_CUDA=1 timeout 90 python3 -m pytest -q -p no:cacheprovider -m cuda \
  tests/test_images.py 2>&1 | grep -v -i "nvjpeg2k\|nvtiff" | tail -4 > "$OUT/cuda_tests.log"; cat "$OUT/cuda_tests.log"
ab() {  # label variant workers references
  mkdir -p "$OUT/$1"
  AB_ONLY="$2" AB_WORKERS=$3 AB_REFERENCES=$4 OUT="$OUT/$1" \
    timeout 80 python3 benchmarks/diag/jpeg_loader_ab.py 4000 150 2>&1 \
    | grep -E "images/s|Error" | sed "s/^/$1 (workers $3): /" | tee -a "$OUT/summary.txt"
}
for round in 1 2; do
  ab "r$round-2lanes" "2 lanes, whole images" 0 0
  ab "r$round-3lanes" "3 lanes, whole images" 0 0
done
ab "workers2" "2 lanes, whole images" 2 0
ab "workers4" "2 lanes, whole images" 4 1
mkdir -p "$OUT/profile"
AB_ONLY="2 lanes, whole images" AB_PROFILE="2 lanes, whole images" AB_REFERENCES=0 OUT="$OUT/profile" \
  timeout 80 python3 benchmarks/diag/jpeg_loader_ab.py 4000 150 > "$OUT/profile/profile.log" 2>&1
grep -E "images/s" "$OUT/profile/profile.log" | sed "s/^/profiled: /" | tee -a "$OUT/summary.txt"
echo "done at ${SECONDS} s"
