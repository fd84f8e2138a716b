#!/bin/bash
# Session 30, call 11 (issue 15; ~230 s, the session's last device time; carry .imgwhl).
# Call 9 (session30-9): nvJPEG's hardware call is host work (thread CPU time = wall); three
# threads decoding bytes already read reach ~29,000 images/s whatever the input memory, the
# loader 21,000-23,000: the lanes wait ~8 ms a batch for their reads, and with batches dealt
# in turn one can wait behind a busy lane while another is idle. (1) the pinned-slabs cuda
# test (also with the reads shared out and any free lane taking the next batch); (2) the
# loader, alternated, 300 batches: as shipped; reads shared out among the readers
# (_image_readers.SPLIT_READS); any free lane (_image_decode.LANES_TAKE_ANY); both.
set -u
export PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=$PWD/.site/nvidia/cu13/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/gpu.txt"
VIDLOADER_FAIL_WITHOUT_CUDA=1 timeout 60 python3 -m pytest -q -s -p no:cacheprovider -m cuda \
  tests/test_image_readers.py 2>&1 | grep -v -i "nvjpeg2k\|nvtiff" > "$OUT/cuda_tests.log"
grep -E "passed|failed|^FAILED|^ERROR" "$OUT/cuda_tests.log" | tail -4
timeout 100 python3 -c "from vidloader.images._synthetic import write_image_folder as w; w('/tmp/jpeg-ab-x1', num_classes=10, per_class=400)"
ab() {  # label split take_any
  mkdir -p "/tmp/ab/$1"
  AB_SPLIT="$2" AB_TAKE_ANY="$3" AB_ONLY="3 lanes, whole images" AB_REFERENCES=0 OUT="/tmp/ab/$1" \
    timeout 40 python3 benchmarks/diag/jpeg_loader_ab.py 4000 300 2>&1 | grep -E "images/s|Error" \
    | sed "s/^/$1: /" | tee -a "$OUT/summary.txt"
}
for round in 1 2 3 4; do
  [ $SECONDS -lt 195 ] && ab "r$round-shipped" 0 0
  [ $SECONDS -lt 195 ] && ab "r$round-split" 1 0
  [ $SECONDS -lt 195 ] && ab "r$round-take-any" 0 1
  [ $SECONDS -lt 195 ] && ab "r$round-both" 1 1
done
echo "done at ${SECONDS} s"
