#!/bin/bash
# Session 12, GPU peers (issue 16, item 5): SPDL 0.8 on NVDEC (`spdl`) and PyAV 19 with
# FFmpeg's CUDA hwaccel (`pyav-nvdec`) as `vidloader bench` backends.
# (1) the cuda tests of tests/test_bench_gpu_peers.py while W1 gpu-quick generates;
# (2) `vidloader bench` on W1 gpu-quick, 16 workers, workloads sequential and random, backends
#     spdl, pyav-nvdec, pynvc-threads and vidloader-nvdec, each (workload, backend) its own
#     command, time limit and JSON (all in $OUT/bench.tgz), under one deadline (DEADLINE s);
# (3) a summary ($OUT/summary.txt) and the merged tables ($OUT/table.md).
# Device call, from the repository root, carry [".whl", ".peers"]:
#   python3 -m pip install -q --no-index --no-deps --no-compile --target .site .whl/*.whl &&
#   export PYTHONPATH=$PWD/src:$PWD/.site && bash benchmarks/diag/session12_peers.sh
# .peers/ holds SPDL's wheels (bash ../shared/tools/peer-wheels.sh, without --dali) and a copy
# of ../shared/tools/ffmpeg-shim.sh: ../shared does not travel to the device.
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/session12-peers}
mkdir -p "$OUT"
DEADLINE=${DEADLINE:-470}  # seconds since this script started; no bench starts past it
RES=/tmp/peers-bench       # the JSONs (tarred into $OUT: a call brings back 8 files at most)
rm -rf "$RES" && mkdir -p "$RES"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"

# SPDL as ../shared/tools/README.md says: its wheels into .site, a folder of FFmpeg soname links
# onto the FFmpeg PyAV's wheel bundles, and the CUDA runtime torch brings on the library path.
python3 -m pip install -q --no-index --no-deps --no-compile --target .site .peers/spdl*.whl
SHIM_SH=../shared/tools/ffmpeg-shim.sh
[ -f "$SHIM_SH" ] || SHIM_SH=.peers/ffmpeg-shim.sh
bash "$SHIM_SH" "$PWD/.site" "$HOME/shim" > "$OUT/bench.log" 2>&1
CUDART=$(dirname $(python3 -c "import glob,sysconfig; print(glob.glob(sysconfig.get_paths()['purelib']+'/nvidia/**/libcudart.so.13*', recursive=True)[0])"))
export LD_LIBRARY_PATH=$HOME/shim:$PWD/.site/av.libs:$CUDART:${LD_LIBRARY_PATH:-}
python3 - <<'PY' 2>&1 | tee -a "$OUT/bench.log"
import importlib.metadata as m
import av, av.codec.hwaccel as hw, spdl.io.utils as u
print("spdl-io", m.version("spdl-io"), "ffmpeg", u.get_ffmpeg_versions().get("libavcodec"),
      "cuda", u.built_with_cuda(), "nvcodec", u.built_with_nvcodec())
print("av", av.__version__, "hwdevices", hw.hwdevices_available())
PY

# (1) W1 in the background; the tests load SPDL's FFmpeg before conftest imports PyNvVideoCodec,
# whose own libavformat.so.63 / libavutil.so.61 would otherwise serve SPDL as well.
timeout 200 python3 -c "from vidloader.bench import prepare_dataset as p; p('W1', 'gpu-quick', data_dir='/tmp/bench-data')" > "$OUT/prepare_W1.log" 2>&1 &
P1=$!
VIDLOADER_FAIL_WITHOUT_CUDA=1 timeout ${TESTS_S:-170} python3 -c \
  "import sys, pytest, spdl.io.utils as u; u.get_ffmpeg_versions(); sys.exit(pytest.main(sys.argv[1:]))" \
  -q -p no:cacheprovider -m cuda tests/test_bench_gpu_peers.py 2>&1 | grep -v "^Svt" > "$OUT/cuda_tests.log"
grep -E "^FAILED|^ERROR|passed|failed" "$OUT/cuda_tests.log" | head -12
wait $P1; echo "prepared W1 gpu-quick: rc $? at ${SECONDS} s"

# (2) One command per (workload, backend), as benchmarks/gpu_run.sh does.
bench() {  # workload backend time-limit timed-batches
  local left=$((DEADLINE - SECONDS)) t=$3
  if [ "$left" -lt 40 ]; then echo "[$1] $2 not run: ${left} s left before the deadline" | tee -a "$OUT/bench.log"; return; fi
  [ "$t" -gt "$left" ] && t=$left
  timeout $((t + 10)) python3 -m vidloader.bench run --scale gpu-quick --dataset W1 \
    --data-dir /tmp/bench-data --out "$RES/$2" --workers 16 --no-plot --batches "$4" \
    --max-seconds 8 --timeout "$t" --workload "$1" --backends "$2" 2>&1 | grep -v "^Svt" >> "$OUT/bench.log"
  grep -E "^\[$1\] $2 \.\.\." "$OUT/bench.log" | tail -1
}
bench sequential vidloader-nvdec 60 96
bench sequential spdl 60 96
bench random spdl 60 48
bench random pyav-nvdec 60 48
bench random vidloader-nvdec 60 48
bench sequential pyav-nvdec 60 96
bench sequential pynvc-threads 50 96
bench random pynvc-threads 50 48
echo "benches done at ${SECONDS} s"

# (3) Summary, tables, archive.
python3 - "$RES" <<'PY' 2>&1 | tee "$OUT/summary.txt"
import glob, json, sys

def fmt(v, spec=",.0f"):
    return "-" if v is None else format(v, spec)

for path in sorted(glob.glob(f"{sys.argv[1]}/*/*.json")):
    report = json.load(open(path))
    for r in report["runs"]:
        head = f"{r['workload']:10s} {r['backend']:16s}"
        if r.get("status") != "ok":
            print(f"{head} {r.get('status')}: {r.get('reason', '')}")
            continue
        counts = r.get("decode_counts") or {}
        print(f"{head} {fmt(r['frames_per_s']):>7s} frames/s  decoded/delivered "
              f"{fmt(r.get('decoded_per_delivered'), '.2f'):>5s}  window {r['seconds']:.1f} s "
              f"{r['window_batches']} batches  NVDEC {fmt(r.get('nvdec_util_pct'))}%  "
              f"GPU {fmt(r.get('gpu_util_pct'))}%  CPU {fmt(r.get('cpu_util_pct'))}%  "
              f"peak GPU {fmt((r.get('peak_gpu_memory_bytes') or 0) / 2**20)} MiB  "
              f"first batch {r['first_batch_s']:.1f} s  tasks {counts.get('tasks', '-')}")
PY
python3 -m vidloader.bench table --results "$RES" --merge-run --base "$RES" \
  --heading "### Session 12: GPU peers (W1 gpu-quick)" > "$OUT/table.md" 2>&1
tar -czf "$OUT/bench.tgz" -C "$RES" .
echo "done at ${SECONDS} s"
