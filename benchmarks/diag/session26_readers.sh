#!/bin/bash
# Written in session 25; run in session 26 as call 2 (benchmarks/results/gpu/session26-2), when
# READER_PROCESSES was 0 and WORKERS_READ_AHEAD off (both are on by default since). Issue 15, one call (~220 s, carry .imgwhl; kind
# nvidia-h200 or nvidia-h100-x1). The in-process GPU image pool with reader processes
# (READER_PROCESSES: files read into shared memory by 2 or 4 processes, the lanes decoding
# numpy views of them) against the lanes given paths (as shipped), alternated twice; one run
# with 3 lanes and 4 readers. Compare with session26_images.sh's upper bound (AB_CACHED: every
# file's bytes already in memory). If the readers come near it and beat paths clearly, make
# READER_PROCESSES 2 the default for num_workers=0; if not, take them out. (They were made
# the default.)
set -u
export PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=$PWD/.site/nvidia/cu13/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/gpu.txt"
timeout 120 python3 -c "from vidloader.images._synthetic import write_image_folder as w; w('/tmp/jpeg-ab-x1', num_classes=10, per_class=400)"
VIDLOADER_FAIL_WITHOUT_CUDA=1 timeout 60 python3 -m pytest -q -p no:cacheprovider \
  tests/test_image_readers.py 2>&1 | tail -2 > "$OUT/reader_tests.log"; cat "$OUT/reader_tests.log"
ab() {  # label readers variant
  mkdir -p "$OUT/$1"
  AB_READERS=$2 AB_ONLY="$3" AB_REFERENCES=0 OUT="$OUT/$1" \
    timeout 60 python3 benchmarks/diag/jpeg_loader_ab.py 4000 150 2>&1 \
    | grep -E "images/s|Error" | sed "s/^/$1 (readers $2): /" | tee -a "$OUT/summary.txt"
}
for round in 1 2; do
  ab "r$round-paths" 0 "2 lanes, whole images"
  ab "r$round-readers2" 2 "2 lanes, whole images"
  ab "r$round-readers4" 4 "2 lanes, whole images"
done
ab "3lanes-readers4" 4 "3 lanes, whole images"
echo "done at ${SECONDS} s"
