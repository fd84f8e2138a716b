#!/bin/bash
# Next session (issue 16 item 4, ~8 min): SPDL's Kinetics headline on the bench's clips-head
# workload (W4 at the gpu scale: 16-frame clips, stride 1, from each video's first 0.6 s; SPDL
# decodes the first 0.5 s; 112² crop, batch 8) and on uniform random clips (clips), SPDL on
# NVDEC against vidloader-nvdec, the combo and vidloader's CPU backend, each in its own command, in one
# call. Derived from session12_peers.sh (its SPDL set-up, bench helper and summary).
# Device call, from the repository root, carry [".whl", ".peers"]:
#   python3 -m pip install -q --no-index --no-deps --no-compile --target .site .whl/*.whl &&
#   export PYTHONPATH=$PWD/src:$PWD/.site && bash benchmarks/diag/session17_spdl_head.sh
# .peers/ holds SPDL's wheels (bash ../shared/tools/peer-wheels.sh, without --dali) and a copy
# of ../shared/tools/ffmpeg-shim.sh: ../shared does not travel to the device. A .peers/ that
# also holds DALI's parts is over the 64 MiB a call carries: carry SPDL's two wheels and the
# shim alone (with .whl, about 45 MiB).
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/session17-spdl-head}
mkdir -p "$OUT"
DEADLINE=${DEADLINE:-470}  # seconds since this script started; no bench starts past it
RES=/tmp/peers-bench       # the JSONs (tarred into $OUT: a call brings back 8 files at most)
rm -rf "$RES" && mkdir -p "$RES"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"

source "$(dirname "$0")/spdl_env.sh"

# (1) W4 in the background; the tests load SPDL's FFmpeg before conftest imports PyNvVideoCodec,
# whose own libavformat.so.63 / libavutil.so.61 would otherwise serve SPDL as well.
timeout 200 python3 -c "from vidloader.bench import prepare_dataset as p; p('W4', 'gpu', data_dir='/tmp/bench-data')" > "$OUT/prepare_W4.log" 2>&1 &
P1=$!
VIDLOADER_FAIL_WITHOUT_CUDA=1 timeout ${TESTS_S:-170} python3 -c \
  "import sys, pytest, spdl.io.utils as u; u.get_ffmpeg_versions(); sys.exit(pytest.main(sys.argv[1:]))" \
  -q -p no:cacheprovider -m cuda tests/test_bench_gpu_peers.py 2>&1 | grep -v "^Svt" > "$OUT/cuda_tests.log"
grep -E "^FAILED|^ERROR|passed|failed" "$OUT/cuda_tests.log" | head -12
wait $P1; echo "prepared W4 gpu: rc $? at ${SECONDS} s"

# (2) One command per (workload, backend), as benchmarks/gpu_run.sh does.
bench() {  # workload backend time-limit timed-batches
  local left=$((DEADLINE - SECONDS)) t=$3
  if [ "$left" -lt 40 ]; then echo "[$1] $2 not run: ${left} s left before the deadline" | tee -a "$OUT/bench.log"; return; fi
  [ "$t" -gt "$left" ] && t=$left
  timeout $((t + 10)) python3 -m vidloader.bench run --scale gpu --dataset W4 \
    --data-dir /tmp/bench-data --out "$RES/$2" --workers 16 --no-plot --batches "$4" \
    --max-seconds 8 --timeout "$t" --workload "$1" --backends "$2" 2>&1 | grep -v "^Svt" >> "$OUT/bench.log"
  grep -E "^\[$1\] $2 \.\.\." "$OUT/bench.log" | tail -1
}
bench clips-head vidloader-nvdec 60 200
bench clips-head spdl 60 200
bench clips-head vidloader 60 200
bench clips-head vidloader-combo 60 200
bench clips vidloader-nvdec 60 200
bench clips spdl 60 200
echo "benches done at ${SECONDS} s"

# (3) Summary, tables, archive.
python3 benchmarks/diag/bench_summary.py "$RES" 2>&1 | tee "$OUT/summary.txt"
python3 -m vidloader.bench table --results "$RES" --merge-run --base "$RES" \
  --heading "### SPDL's Kinetics workload (W4 gpu): clips-head and clips" > "$OUT/table.md" 2>&1
tar -czf "$OUT/bench.tgz" -C "$RES" .
echo "done at ${SECONDS} s"
