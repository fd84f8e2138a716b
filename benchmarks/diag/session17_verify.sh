#!/bin/bash
# Session 17, call 7 (~7 min; carry .whl and .peers with SPDL's two wheels and ffmpeg-shim.sh,
# as session17_spdl_head.sh): the session's two changes on the GPU machine.
# (1) nvdec_decoders=None picks 4 decoder threads on W4 (small frames): the bench's clips-head
#     (SPDL's Kinetics setting) for vidloader-nvdec, SPDL, the CPU backend and the combo, as in
#     call 1; then uniform random clips on W4 (NVDEC busier there), the new default against 16.
# (2) demux workers trim their heap after each unit: host PSS of W1 uniform random frames,
#     which had 3.9-4.1 GiB in the demux workers (session17-6).
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/session17-verify}
mkdir -p "$OUT"
RES=/tmp/verify-bench; rm -rf "$RES" && mkdir -p "$RES"
source "$(dirname "$0")/spdl_env.sh"
source "$(dirname "$0")/device_prepare.sh" W4 gpu 200
bench() {  # workload backend time-limit
  timeout $(($3 + 10)) python3 -m vidloader.bench run --scale gpu --dataset W4 \
    --data-dir /tmp/bench-data --out "$RES/$2" --workers 16 --no-plot --batches 200 \
    --max-seconds 8 --timeout "$3" --workload "$1" --backends "$2" 2>&1 | grep -v "^Svt" >> "$OUT/bench.log"
  echo "[$1] $2 done at ${SECONDS} s"
}
bench clips-head vidloader-nvdec 60
bench clips-head spdl 60
bench clips-head vidloader 60
bench clips-head vidloader-combo 60
python3 benchmarks/diag/bench_summary.py "$RES" 2>&1 | tee "$OUT/summary.txt"
timeout 120 python3 -m vidloader.bench._combo_run --workloads W4-clips --scale gpu \
  --variants nvdec,nvdec-dec16 --warmup-s 3 --window-s 5 --windows 3 --out $OUT/clips_decoders.json 2>&1 \
  | grep -v "^Svt" > $OUT/clips_decoders.log
grep -E "summary" $OUT/clips_decoders.log | cut -c1-200
source "$(dirname "$0")/device_prepare.sh" W1 gpu-quick
timeout 80 python3 benchmarks/diag/gpu_memory_probe.py --sampler random --batches 50 --warmup 10 \
  --no-history --tag rnd-trim > $OUT/probe-rnd-trim.log 2>&1
echo "rnd-trim rc $? $(grep -E '^frames_per_s|^smi_loader_peak_gib|^host_peak_pss_gib' $OUT/probe-rnd-trim.log | tr '\n' ' ')"
tar -czf "$OUT/results.tgz" -C "$RES" . -C "$OUT" $(cd $OUT && ls gpu_memory-*.json probe-*.log 2>/dev/null)
rm -f $OUT/gpu_memory-*.json $OUT/probe-*.log $OUT/prepare_*.log  # a call brings back 8 files at most
echo "done at ${SECONDS} s"
