#!/bin/bash
# WRITTEN IN SESSION 27, NEVER RUN: overtaken in session 28 (session28_host2.sh measured the host
# work with nvJPEG's decoder, now the default; see docs/images-performance.md, "Session 28").
# Issue 15 (carry .imgwhl; DALI unpacked to $HOME/dalisite
# by three calls just before on the same warm machine, as session 27's calls 3-5 did; ~550 s;
# the image cuda tests first).
# Session 27 found nvImageCodec's decode retaking the GIL about 2.6 times an image: beside a
# pure-Python thread it fell from ~15,000 to 67-83 images/s (5 ms switch interval) and 773-809
# (0.5 ms) (session27-8, -9). A pure-Python loop is the worst case; a training step's host
# side dispatches ops that let go of the GIL between them. The JPEG bench with DALI, the
# consumer working 10 ms after each batch of 256 (a bound of 25,600 images/s) with small torch
# ops (--host-work torch), idle, then with a pure-Python loop, then torch again (drift): does
# the default loader (2 GPU worker processes) keep its pace, how far does the one-process
# pool fall, and does DALI? (The decode-alone rows decode on the consumer's thread: the work
# follows each decode there, their JSON says so.) Each GPU row also gives, from nvidia-smi,
# the JPEG decoder's and the GPU's utilisation over its timed span and the memory it added
# (new in session 27): is the hardware decoder saturated under DALI and not under vidloader?
set -u
export PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=$PWD/.site/nvidia/cu13/lib:${LD_LIBRARY_PATH:-}
export PYTHONPATH=${PYTHONPATH:-}:$HOME/dalisite
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt
python3 -c "import nvidia.dali as d; print('DALI', d.__version__)" 2>&1 | tail -1 | tee $OUT/dali.txt
# First the image cuda tests: session 27 changed the packed buffer (aligned in memory), the
# decoder's constructor (packed support checked once) and added the memory plan's GPU test.
VIDLOADER_FAIL_WITHOUT_CUDA=1 timeout 120 python3 -m pytest -q -s -p no:cacheprovider -m cuda \
  tests/test_images.py tests/test_images_workers.py tests/test_images_batched.py \
  tests/test_image_memory.py 2>&1 | grep -v -i "nvjpeg2k\|nvtiff" > "$OUT/cuda_tests.log"
grep -E "passed|failed|^FAILED|^ERROR" "$OUT/cuda_tests.log" | tail -6
bench() {  # label, then bench options; one log and one archive of JSONs ($OUT keeps 8 files)
  local label=$1; shift
  [ $SECONDS -lt 400 ] || { echo "$label: skipped at ${SECONDS} s" | tee -a $OUT/bench_images.log; return; }
  echo "== $label: $*" >> $OUT/bench_images.log
  timeout $(( 580 - SECONDS )) python3 -m vidloader.bench images --workload jpeg --images 4000 \
    --copies 10 --batches 200 --data-dir /tmp/bench-images --out /tmp/bench-json/$label "$@" 2>&1 \
    | grep -v -i "nvjpeg2k\|nvtiff\|^\[" | tee -a $OUT/bench_images.log | sed "s/^/$label: /" | tail -9
  echo "$label done at ${SECONDS} s"
}
bench torch10 --host-ms 10 --host-work torch
bench idle
bench python10 --host-ms 10 --host-work python
bench torch10-again --host-ms 10 --host-work torch
tar czf $OUT/bench_json.tgz -C /tmp bench-json
