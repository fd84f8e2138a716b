#!/bin/bash
# Session 23, call 2: GPU memory against decoder threads per NVDEC worker process (issue 16
# items 1 and 3). W3 at the gpu scale (1600×900 HEVC, 6 cameras); each variant in its own
# command, a pause between, so the last run's processes have given their memory back.
set -u
export PYTHONUNBUFFERED=1
DEADLINE=${DEADLINE:-570}
RES=/tmp/call2; rm -rf "$RES" && mkdir -p "$RES"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/gpu.txt"
timeout 200 python3 -c "from vidloader.bench import prepare_dataset as p; p('W3', 'gpu', data_dir='/tmp/bench-data')" > "$OUT/prepare_W3.log" 2>&1
echo "prepared W3 at ${SECONDS} s"
run() {  # workload variant
  local left=$((DEADLINE - SECONDS))
  if [ "$left" -lt 45 ]; then echo "$1 $2 not run: ${left} s left"; return; fi
  sleep 2
  timeout $(( left < 90 ? left : 90 )) python3 -m vidloader.bench._combo_run --workloads $1 --scale gpu \
    --data-dir /tmp/bench-data --workers 16 --variants $2 --warmup-s 4 --window-s 4 --windows 3 \
    --out $RES/$1-$2.json 2>&1 | grep -v "^Svt" > $RES/$1-$2.log
  grep -E "summary" $RES/$1-$2.log | cut -c1-160
}
for v in nvdec-p4 nvdec-p4-dec8 nvdec-p4-dec4 nvdec-p4-dec2 nvdec-p8-dec2; do run W3-stream-long $v; done
for v in nvdec-p4-la8 nvdec-p4-la8-dec8 nvdec-p4-la8-dec4; do run W3-random $v; done
python3 benchmarks/diag/combo_summary.py "$RES" | tee "$OUT/summary.txt"
python3 - "$RES" <<'PY' | tee -a "$OUT/summary.txt"
import glob, json, sys
for f in sorted(glob.glob(sys.argv[1] + "/*.json")):
    for wl, vs in json.load(open(f))["results"].items():
        for v, r in vs.items():
            print(f"{wl:15s} {v:20s} decoders/process {r.get('nvdec_decoders')} "
                  f"GPU peak {r['gpu_mem_peak_bytes']/2**30:.1f} GiB baseline {r['gpu_mem_baseline_bytes']/2**30:.1f}")
PY
tar -czf "$OUT/results.tgz" -C "$RES" .
echo "done at ${SECONDS} s"
