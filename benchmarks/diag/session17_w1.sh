#!/bin/bash
# Session 17, call 2 (~8 min, carry .whl), W1 at gpu-quick (100 × 2 s 1080p H.264):
# (1) issue 16 item 1: the NVDEC loader's GPU memory with memory_budget="3GiB" (planned in
#     session 10 at 12 decoders, one unit decoding, stacks of 2; never measured) beside the
#     default, on uniform random frames (gpu_memory_probe.py); then sequential reading through
#     the bench, vidloader-nvdec beside the raw 16-thread ceiling, default and 3 GiB, with the
#     peak host memory (PSS) since demux workers stopped importing torch (session 15);
# (2) issue 14: start-up with 16 workers (session17_startup.sh: the first batch dealt as whole
#     GOPs against the old row cut, the CPU backend and NVDEC, CUDA started first).
set -u
source "$(dirname "$0")/device_prepare.sh" W1 gpu-quick
DEADLINE=${DEADLINE:-340}  # seconds; no bench starts past it (the start-up part needs ~3 min)
for budget in default 3GiB; do
  args=$([ $budget = default ] || echo "--memory-budget $budget")
  timeout 90 python3 benchmarks/diag/gpu_memory_probe.py --batches 60 $args --tag random-$budget \
    > $OUT/gpu_memory-random-$budget.log 2>&1
  echo "probe $budget rc $?"; grep -E "^frames_per_s|^plan settings|^plan_total|^smi_loader_peak|^torch_peak_reserved|^outside_torch" $OUT/gpu_memory-random-$budget.log | cut -c1-240 | head -8
done
RES=/tmp/w1-bench; rm -rf $RES; mkdir -p $RES
bench() {  # backend tag time-limit [extra args]
  local left=$((DEADLINE - SECONDS)) t=$3
  if [ "$left" -lt 40 ]; then echo "$1 $2 not run: ${left} s left"; return; fi
  [ "$t" -gt "$left" ] && t=$left
  timeout $((t + 10)) python3 -m vidloader.bench run --scale gpu-quick --dataset W1 --data-dir /tmp/bench-data \
    --out $RES/$2 --workers 16 --no-plot --batches 160 --max-seconds 12 --timeout $t \
    --workload sequential --backends $1 "${@:4}" 2>&1 | grep -v "^Svt" >> $OUT/bench.log
  echo "$2 done at ${SECONDS} s"
}
bench pynvc-threads ceiling 45
bench vidloader-nvdec nvdec-default 90
bench vidloader-nvdec nvdec-3GiB 90 --memory-budget 3GiB
python3 benchmarks/diag/bench_summary.py $RES 2>&1 | tee $OUT/summary.txt
python3 - "$RES" <<'PY' | tee -a $OUT/summary.txt
import glob, json, sys
for path in sorted(glob.glob(f"{sys.argv[1]}/*/*.json")):
    for r in json.load(open(path))["runs"]:
        host = (r.get("peak_host_memory_bytes") or 0) / 2**30
        print(path.split("/")[-2], "peak host", f"{host:.2f} GiB")
PY
tar -czf $OUT/bench.tgz -C $RES .
bash "$(dirname "$0")/session17_startup.sh" 2>&1 | grep -v "^prepared"
echo "done at ${SECONDS} s"
