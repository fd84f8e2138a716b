#!/bin/bash
# Session 31, last call (issue 15; carry .imgwhl; DALI 2.4 unpacked to $HOME/dalisite by the
# three upload calls before it on the same warm machine). Two decode lanes are the default
# since this session (session31-1 and -7: 2 lanes above 3 in alternated rounds). (1) vidloader
# against DALI only (`--contenders vidloader,dali`), 8 rounds alternated, so the same-call
# ratio rests on more rounds than the 3 a full bench fits; (2) the same with 10 ms of torch
# work a batch, 2 rounds; (3) if time is left, the loader's rounds: 2 lanes as shipped, 3
# lanes, 2 lanes dealt in turn. Writes 5 files to $OUT (device.txt and script.txt are the
# call's); each step appends as it goes, so a call cut short still brings back what ran.
set -u
export PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=$PWD/.site/nvidia/cu13/lib:${LD_LIBRARY_PATH:-}
python3 -c "import nvidia.dali as d; print('DALI', d.__version__)" > "$OUT/dali.txt" 2>&1
grep -n "^NVIMGCODEC_LANES\|^LANES_TAKE_ANY\|^PIN_READ_SLABS" src/vidloader/pipeline/_image_decode.py >> "$OUT/dali.txt"
bench() {  # label, seconds allowed, bench arguments
  local l=$1 t=$2; shift 2
  echo "== $l: $*" >> "$OUT/bench_images.log"
  timeout "$t" python3 -m vidloader.bench images --workload jpeg --images 4000 --copies 10 \
    --batches 300 --data-dir /tmp/bench-images --out "/tmp/bench-json/$l" "$@" 2>&1 \
    | grep -v -i "nvjpeg2k\|nvtiff\|^\[" >> "$OUT/bench_images.log"
  echo "$l done at $SECONDS s" >> "$OUT/bench_images.log"
  tar czf "$OUT/bench_json.tgz" -C /tmp bench-json
}
bench idle 330 --contenders vidloader,dali --rounds 8
bench torch10 120 --contenders vidloader,dali --rounds 2 --host-ms 10 --host-work torch
grep -E "round|DALI|torch" "$OUT/bench_images.log"
if [ $SECONDS -lt 420 ]; then
  ROUNDS_ONLY="shipped;3 lanes;split only" timeout $(( 560 - SECONDS )) python3 \
    benchmarks/diag/jpeg_loader_rounds.py 4000 300 3 2>&1 | grep -v -i "nvjpeg2k\|nvtiff" > "$OUT/rounds.log"
  grep -E "round|medians|Error" "$OUT/rounds.log"
fi
echo "done at ${SECONDS} s"
