#!/bin/bash
# Session 28, call 9 (issue 15; carry .imgwhl; DALI unpacked to $HOME/dalisite by calls 6-8 on
# the same warm machine). With nvJPEG's hardware decoder (the default since session28-1), the
# one-process pool ran ahead of the 2 GPU workers in 4 of 5 pairs (session28-1, -5), at 52% GPU
# utilisation against 72-84%, and +3.6 against +6.8 GiB. (1) the image memory plan's GPU test
# (cuBLAS's workspace now counted) and nvjpeg's tests; (2) the one-process loader with 2 and 3
# decode lanes, alternated twice; (3) `bench images` with DALI, the consumer working 10 ms after
# each batch with small torch ops (--host-ms 10 --host-work torch: a bound of 25,600 images/s),
# two rounds: does the one-process pool keep its lead beside a training step's host work?
# (4) one round with a pure-Python loop instead (the worst case), as time allows.
set -u
export PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=$PWD/.site/nvidia/cu13/lib:${LD_LIBRARY_PATH:-}
export PYTHONPATH=$PYTHONPATH:$HOME/dalisite
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt
python3 -c "import nvidia.dali as d; print('DALI', d.__version__)" 2>&1 | tail -1 | tee $OUT/dali.txt
VIDLOADER_FAIL_WITHOUT_CUDA=1 timeout 100 python3 -m pytest -q -s -p no:cacheprovider -m cuda \
  tests/test_nvjpeg.py tests/test_image_memory.py 2>&1 | grep -v -i "nvjpeg2k\|nvtiff" > "$OUT/cuda_tests.log"
grep -E "passed|failed|^FAILED|^ERROR|peak" "$OUT/cuda_tests.log" | tail -8
timeout 100 python3 -c "from vidloader.images._synthetic import write_image_folder as w; w('/tmp/jpeg-ab-x1', num_classes=10, per_class=400)"
ab() {  # label variant
  mkdir -p "$OUT/$1"
  AB_ONLY="$2" AB_REFERENCES=0 OUT="$OUT/$1" timeout 60 python3 benchmarks/diag/jpeg_loader_ab.py 4000 150 2>&1 \
    | grep -E "images/s|Error" | sed "s/^/$1: /" | tee -a "$OUT/bench_images.log"
}
for round in 1 2; do
  ab "r$round-2lanes" "2 lanes, whole images"
  ab "r$round-3lanes" "3 lanes, whole images"
done
rm -rf "$OUT"/r?-*
echo "lanes done at ${SECONDS} s"
bench() {  # label, then bench options
  local label=$1; shift
  echo "== $label: $*" >> $OUT/bench_images.log
  timeout $(( 585 - SECONDS )) python3 -m vidloader.bench images --workload jpeg --images 4000 \
    --copies 10 --batches 300 --data-dir /tmp/bench-images --out /tmp/bench-json/$label "$@" 2>&1 \
    | grep -v -i "nvjpeg2k\|nvtiff\|^\[" | tee -a $OUT/bench_images.log | sed "s/^/$label: /" | tail -20
  echo "$label done at ${SECONDS} s"
}
bench torch10 --host-ms 10 --host-work torch --rounds 2
[ $SECONDS -lt 430 ] && bench python10 --host-ms 10 --host-work python
tar czf $OUT/bench_json.tgz -C /tmp bench-json
