#!/bin/bash
# Written in session 25; run in session 26 as call 1 (benchmarks/results/gpu/session26-1), when
# READER_PROCESSES was 0 and WORKERS_READ_AHEAD off (both are on by default since). Issue 15, one call (carry .imgwhl; kind
# nvidia-h200 or nvidia-h100-x1). Session 25 found nvImageCodec's packed decode 1.5-2.1x
# faster on bytes already read than on paths (one thread, session25-4), while the in-process
# pool, which gives it paths, runs at 8,300-9,500 images/s and handing it bytes read by its
# reader threads was slower (the reads take the GIL). Before building readers in other
# processes (files read into shared memory, no GIL of ours), this measures their upper bound:
# the in-process pool's lanes given every file's bytes from memory (AB_CACHED=1), against
# paths, alternated twice; then 3 lanes on cached bytes, and the decode alone for reference;
# last, nvImageCodec's num_cuda_streams option on the decode alone. About 330 s.
# The image cuda tests first (session 25's review mends reached the GPU path after call 3).
set -u
export PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=$PWD/.site/nvidia/cu13/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/gpu.txt"
# The folder is written once here, outside every timed run's limit (session25-6 lost a run to it).
timeout 120 python3 -c "from vidloader.images._synthetic import write_image_folder as w; w('/tmp/jpeg-ab-x1', num_classes=10, per_class=400)"
VIDLOADER_FAIL_WITHOUT_CUDA=1 timeout 120 python3 -m pytest -q -p no:cacheprovider -m cuda \
  tests/test_images.py tests/test_images_workers.py 2>&1 | grep -v -i "nvjpeg2k\|nvtiff" \
  | tail -6 > "$OUT/cuda_tests.log"; cat "$OUT/cuda_tests.log"
ab() {  # label cached(1/0) variant references
  mkdir -p "$OUT/$1"
  AB_READERS=0 AB_CACHED=$2 AB_ONLY="$3" AB_REFERENCES=$4 OUT="$OUT/$1" \
    timeout 60 python3 benchmarks/diag/jpeg_loader_ab.py 4000 150 2>&1 \
    | grep -E "images/s|Error" | sed "s/^/$1: /" | tee -a "$OUT/summary.txt"
}
for round in 1 2; do
  ab "r$round-paths" 0 "2 lanes, whole images" 0
  ab "r$round-cached" 1 "2 lanes, whole images" 0
done
ab "cached-3lanes" 1 "3 lanes, whole images" 1
mkdir -p "$OUT/profile"
AB_CACHED=1 AB_ONLY="2 lanes, whole images" AB_PROFILE="2 lanes, whole images" AB_REFERENCES=0 \
  OUT="$OUT/profile" timeout 60 python3 benchmarks/diag/jpeg_loader_ab.py 4000 150 > "$OUT/profile/profile.log" 2>&1
grep -E "images/s" "$OUT/profile/profile.log" | sed "s/^/profiled (cached): /" | tee -a "$OUT/summary.txt"
# nvImageCodec's ":num_cuda_streams=4" option (session 19, H200, one run: 21,041 images/s on
# two threads against 19,034 without) on the packed decode of pre-read bytes, 1 and 2 threads.
for opts in "" ":num_cuda_streams=4"; do
  dir="$OUT/sources${opts:+-streams4}"; mkdir -p "$dir"
  SOURCES_OPTIONS="$opts" SOURCES_KINDS="bytes read beforehand" OUT="$dir" timeout 60 \
    python3 benchmarks/diag/jpeg_sources_probe.py 4000 30 2>&1 | grep "images/s" \
    | sed "s/^/options '$opts': /" | tee -a "$OUT/summary.txt"
done
echo "done at ${SECONDS} s"
