#!/bin/bash
# Session 21, call 9 (~9.5 min, carry .whl and SPDL's wheels), issue 16 items 2 and 5, after
# the NVDEC defaults changed to stacks of 16 and no frame cache (calls 7-8):
# (1) the NVDEC cuda tests with the new defaults;
# (2) the raw ceiling (pynvc-threads) on sequential and relaxed, 16 s windows;
# (3) `_combo_run`, three 8 s windows each: W1-sequential with the default loader and in 4
#     processes, W1-relaxed in 4 processes (item 2: >= 0.97 of raw as the minimum window);
# (4) `bench run` sequential: SPDL and vidloader-nvdec (now the defaults) one after the other;
#     W4 clips-head, vidloader-nvdec and SPDL.
set -u
export PYTHONUNBUFFERED=1
DEADLINE=${DEADLINE:-560}
RES=/tmp/defaults; rm -rf "$RES" && mkdir -p "$RES"
source benchmarks/diag/spdl_env.sh
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/gpu.txt"
timeout 200 python3 -c "from vidloader.bench import prepare_dataset as p; p('W1', 'gpu-quick', data_dir='/tmp/bench-data'); p('W4', 'gpu-quick', data_dir='/tmp/bench-data')" > "$OUT/prepare.log" 2>&1 &
P1=$!
VIDLOADER_FAIL_WITHOUT_CUDA=1 timeout 170 python3 -c \
  "import sys, pytest, spdl.io.utils as u; u.get_ffmpeg_versions(); sys.exit(pytest.main(sys.argv[1:]))" \
  -q -p no:cacheprovider -m cuda -x tests/test_nvdec.py tests/test_loader_nvdec.py \
  tests/test_memory_budget.py tests/test_nvdec_processes.py 2>&1 | grep -v "^Svt" > "$OUT/cuda_tests.log"
grep -E "^FAILED|^ERROR|passed|failed" "$OUT/cuda_tests.log" | head -12
wait $P1; echo "prepared W1 and W4: rc $? at ${SECONDS} s"
for w in sequential relaxed; do
  timeout 60 python3 -m vidloader.bench run --scale gpu-quick --dataset W1 --data-dir /tmp/bench-data \
    --out "$RES/raw-$w" --workers 16 --no-plot --batches 600 --max-seconds 16 --timeout 50 \
    --workload $w --backends pynvc-threads 2>&1 | grep -E "^\[$w\]" | tail -1
done
combo() {  # out-name workloads variants
  local left=$((DEADLINE - SECONDS))
  if [ "$left" -lt 60 ]; then echo "$1 not run: ${left} s left"; return; fi
  timeout $(( left < 200 ? left : 200 )) python3 -m vidloader.bench._combo_run --workloads $2 --scale gpu-quick \
    --data-dir /tmp/bench-data --workers 16 --variants $3 --warmup-s 3 --window-s 8 --windows 3 \
    --out $RES/$1.json 2>&1 | grep -v "^Svt" > $RES/$1.log
  grep -E "summary" $RES/$1.log | cut -c1-200
  echo "$1 done at ${SECONDS} s"
}
combo seq W1-sequential nvdec,nvdec-p4
combo relaxed W1-relaxed nvdec-p4
bench() {  # dataset workload backend
  local left=$((DEADLINE - SECONDS))
  if [ "$left" -lt 40 ]; then echo "[$2] $3 not run: ${left} s left"; return; fi
  timeout $(( left < 70 ? left : 70 )) python3 -m vidloader.bench run --scale gpu-quick --dataset $1 \
    --data-dir /tmp/bench-data --out "$RES/$2-$3" --workers 16 --no-plot --batches 300 \
    --max-seconds 8 --timeout 60 --workload $2 --backends $3 2>&1 | grep -v "^Svt" >> "$OUT/bench.log"
  echo "[$2] $3 done at ${SECONDS} s"
}
bench W1 sequential spdl
bench W1 sequential vidloader-nvdec
bench W4 clips-head vidloader-nvdec
bench W4 clips-head spdl
python3 - "$RES" <<'PY' | tee "$OUT/summary.txt"
import glob, json, sys
for f in sorted(glob.glob(sys.argv[1] + "/*.json")):
    d = json.load(open(f))
    for wl, row in d.get("results", {}).items():
        for label, v in row.items():
            if "error" in v:
                print(wl, label, "error", v["error"]); continue
            print(f"{wl:14s} {label:12s} median {v['frames_per_s']:7.0f} min {v['frames_per_s_min']:7.0f} "
                  f"windows {[round(x) for x in v['frames_per_s_windows']]} nvdec {v.get('nvdec_util_pct', 0):.0f}% "
                  f"peak GPU {v.get('gpu_mem_peak_bytes', 0) / 2**30:.1f} GiB host {v.get('peak_host_memory_bytes', 0) / 2**30:.2f} GiB")
PY
python3 benchmarks/diag/bench_summary.py "$RES" 2>&1 | tee -a "$OUT/summary.txt"
tar -czf "$OUT/results.tgz" -C "$RES" .
echo "done at ${SECONDS} s"
