#!/bin/bash
# WRITTEN IN SESSION 30, NOT YET RUN. Issue 15, one call (~400 s; carry .imgwhl; kind
# nvidia-h200). Session 30 turned on, on thin evidence (session30-11: two rounds and one on a
# noisy machine), the readers sharing each batch's reads out (_image_readers.SPLIT_READS) and
# any free lane taking the next batch (_image_decode.LANES_TAKE_ANY), beside the slabs
# page-locked (PIN_READ_SLABS, session30-9). (1) the image cuda tests; (2)
# jpeg_loader_rounds.py: shipped / split only / any lane only / neither / pageable /
# prefetch 3 / 2 lanes, four rounds alternated in ONE process (ab runs cost ~25 s each in session30-11); (3) the
# timeline as shipped (does a lane still wait for its read?). At most 8 files come back from
# $OUT: this writes 6 (device.txt and script.txt are the call's). Then, on the same warm
# machine: DALI's three upload calls and `bench images --rounds 3` (session29-8's command, in
# its script.txt).
set -u
export PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=$PWD/.site/nvidia/cu13/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/gpu.txt"
VIDLOADER_FAIL_WITHOUT_CUDA=1 timeout 150 python3 -m pytest -q -s -p no:cacheprovider -m cuda \
  tests/test_image_readers.py tests/test_nvjpeg.py tests/test_triton_resize.py tests/test_images.py \
  tests/test_images_workers.py tests/test_images_batched.py tests/test_image_memory.py 2>&1 \
  | grep -v -i "nvjpeg2k\|nvtiff" > "$OUT/cuda_tests.log"
grep -E "passed|failed|^FAILED|^ERROR" "$OUT/cuda_tests.log" | tail -8
timeout 240 python3 benchmarks/diag/jpeg_loader_rounds.py 4000 300 4 2>&1 \
  | grep -v -i "nvjpeg2k\|nvtiff" > "$OUT/rounds.log"; grep -E "round|medians|Error" "$OUT/rounds.log"
TIMELINE_ONLY="3 lanes, prefetch 2" timeout 60 python3 benchmarks/diag/jpeg_loader_timeline.py 4000 150 2>&1 \
  | grep -v -i "nvjpeg2k\|nvtiff" > "$OUT/timeline_log.txt"; grep -E "images/s|Error" "$OUT/timeline_log.txt"
echo "done at ${SECONDS} s"
