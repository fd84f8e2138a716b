#!/bin/bash
# Session 22, call 2 (~9 min, carry .whl), issue 16 items 2 and 3:
# (1) item 2 again, the raw ceiling bracketing the loader: raw sequential, W1-sequential in 4
#     processes and in one, raw relaxed, W1-relaxed in 4 processes, raw sequential again (call 1
#     had raw at 2,432 / 2,607 frames/s, below session 19's 3,038-3,065);
# (2) item 3: W3-stream-long (the rigs listed 20 times, so no window spans an epoch's restart)
#     in one process with the stack sampler (--profile), then in 4 and 8 processes; W3-stream
#     (the 60-batch epochs) in 4 processes for comparison.
set -u
export PYTHONUNBUFFERED=1
DEADLINE=${DEADLINE:-570}
RES=/tmp/s22c2; rm -rf "$RES" && mkdir -p "$RES"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/gpu.txt"
timeout 150 python3 -c "from vidloader.bench import prepare_dataset as p; p('W1', 'gpu-quick', data_dir='/tmp/bench-data')" > "$OUT/prepare_W1.log" 2>&1 &
P1=$!
timeout 300 python3 -c "from vidloader.bench import prepare_dataset as p; p('W3', 'gpu', data_dir='/tmp/bench-data')" > "$OUT/prepare_W3.log" 2>&1 &
P3=$!
wait $P1; echo "prepared W1: rc $? at ${SECONDS} s"
raw() {  # workload
  timeout 60 python3 -m vidloader.bench run --scale gpu-quick --dataset W1 --data-dir /tmp/bench-data \
    --out "$RES/raw-$1-$SECONDS" --workers 16 --no-plot --batches 600 --max-seconds 16 --timeout 50 \
    --workload $1 --backends pynvc-threads 2>&1 | grep -E "^\[$1\]" | tail -1
}
combo() {  # out-name scale workloads variants window-s [extra]
  local left=$((DEADLINE - SECONDS))
  if [ "$left" -lt 50 ]; then echo "$1 not run: ${left} s left"; return; fi
  timeout $(( left < 200 ? left : 200 )) python3 -m vidloader.bench._combo_run --workloads $3 --scale $2 \
    --data-dir /tmp/bench-data --workers 16 --variants $4 --warmup-s 3 --window-s $5 --windows 3 \
    --out $RES/$1.json ${6:-} 2>&1 | grep -v "^Svt" > $RES/$1.log
  grep -E "summary" $RES/$1.log | cut -c1-200
  echo "$1 done at ${SECONDS} s"
}
raw sequential
combo seq gpu-quick W1-sequential nvdec-p4,nvdec 8
raw relaxed
combo relaxed gpu-quick W1-relaxed nvdec-p4 8
raw sequential
wait $P3; echo "prepared W3: rc $? at ${SECONDS} s"
combo w3long-profile gpu W3-stream-long nvdec 4 --profile
combo w3long gpu W3-stream-long nvdec-p4,nvdec-p8 4
combo w3 gpu W3-stream nvdec-p4 4
python3 benchmarks/diag/combo_summary.py "$RES" | tee "$OUT/summary.txt"
python3 benchmarks/diag/bench_summary.py "$RES" 2>&1 | tee -a "$OUT/summary.txt"
python3 - "$RES/w3long-profile.json" <<'PY' > "$OUT/profile.txt" 2>&1
import json, sys
for wl, row in json.load(open(sys.argv[1]))["results"].items():
    for label, v in row.items():
        for phase, groups in (v.get("profile") or {}).items():
            for group, e in groups.items():
                print(f"== {label} {phase} {group} ({e['samples']} samples)")
                for key in ("ours", "leaf"):
                    print(f"  {key}: " + "; ".join(f"{w} {c:.2f}" for w, c in e[key]))
PY
head -c 3000 "$OUT/profile.txt"
tar -czf "$OUT/results.tgz" -C "$RES" .
echo "done at ${SECONDS} s"
