#!/bin/bash
# Session 23, call 3: the new defaults and knobs of NVDEC worker processes (issue 16 items 1
# and 3): decoder threads shared out by processes (ceil(2 × one process's / K)), memory plans
# and memory_budget over processes, one unit at a time a process (units_decoding=1).
# (1) the processes' cuda tests (equal to one process, also with one unit and one decoder);
# (2) W3-stream-long and W3-random (lookahead 8) in 4 processes with the new defaults, one unit
#     a process, a 24 GiB budget; (3) W1 sequential in 4 processes, new default (8 threads a
#     process) against 16 (the old), alternated.
set -u
export PYTHONUNBUFFERED=1
DEADLINE=${DEADLINE:-575}
RES=/tmp/call3; rm -rf "$RES" && mkdir -p "$RES"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/gpu.txt"
( timeout 200 python3 -c "from vidloader.bench import prepare_dataset as p; p('W3', 'gpu', data_dir='/tmp/bench-data')" > "$OUT/prepare.log" 2>&1
  timeout 150 python3 -c "from vidloader.bench import prepare_dataset as p; p('W1', 'gpu-quick', data_dir='/tmp/bench-data')" >> "$OUT/prepare.log" 2>&1 ) &
P=$!
VIDLOADER_FAIL_WITHOUT_CUDA=1 timeout 150 python3 -m pytest -q -p no:cacheprovider -m cuda \
  tests/test_loader_nvdec.py -k "processes" 2>&1 | grep -v "^Svt" > "$OUT/cuda_tests.log"
grep -E "^FAILED|^ERROR|passed|failed" "$OUT/cuda_tests.log" | head -6
wait $P; echo "prepared at ${SECONDS} s"
run() {  # scale workload variant
  local left=$((DEADLINE - SECONDS))
  if [ "$left" -lt 45 ]; then echo "$2 $3 not run: ${left} s left"; return; fi
  sleep 2
  timeout $(( left < 90 ? left : 90 )) python3 -m vidloader.bench._combo_run --workloads $2 --scale $1 \
    --data-dir /tmp/bench-data --workers 16 --variants $3 --warmup-s 4 --window-s 4 --windows 3 \
    --out $RES/$2-$3-$SECONDS.json 2>&1 | grep -v "^Svt" > $RES/$2-$3-$SECONDS.log
  grep -hE "summary" $RES/$2-$3-*.log | tail -1 | cut -c1-160
}
run gpu W3-stream-long nvdec-p4
run gpu W3-random nvdec-p4-la8
run gpu W3-random nvdec-p4-la8-units1
run gpu W3-stream-long nvdec-p4-units1
run gpu W3-random nvdec-p4-la8-24g
run gpu-quick W1-sequential nvdec-p4
run gpu-quick W1-sequential nvdec-p4-dec16
run gpu-quick W1-sequential nvdec-p4
run gpu-quick W1-sequential nvdec-p4-dec16
python3 benchmarks/diag/combo_summary.py "$RES" | tee "$OUT/summary.txt"
python3 - "$RES" <<'PY' | tee -a "$OUT/summary.txt"
import glob, json, sys
for f in sorted(glob.glob(sys.argv[1] + "/*.json")):
    for wl, vs in json.load(open(f))["results"].items():
        for v, r in vs.items():
            plan = r.get("memory_plan") or {}
            print(f"{wl:15s} {v:20s} decoders/process {r.get('nvdec_decoders')} slots {plan.get('staging_slots')} "
                  f"plan {plan.get('total_bytes', 0)/2**30:.1f} GiB (staging {plan.get('components_bytes', {}).get('staging', 0)/2**30:.1f}) "
                  f"GPU peak {r['gpu_mem_peak_bytes']/2**30:.1f} GiB baseline {r['gpu_mem_baseline_bytes']/2**30:.1f}")
PY
tar -czf "$OUT/results.tgz" -C "$RES" .
echo "done at ${SECONDS} s"
