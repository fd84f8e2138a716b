#!/bin/bash
# Session 21, call 11 (~7 min, carry .whl), issue 16 item 2, one NVDEC process: (1) the NVDEC
# cuda tests with each picture copied out of its surface by cudaMemcpy2DAsync through ctypes
# (the GIL released; decoding/nvdec/_surface_copy.py) instead of torch's copy_ (call 7's
# profile: 17% of the decoder threads' samples on that copy); (2) W1-sequential, three 6 s
# windows each, alternated three times: with the new copy ("nvdec") and without
# ("nvdec-nomemcpy"); 24 and 32 decoder threads once each; (3) W1-random, both copies once.
set -u
source "$(dirname "$0")/device_prepare.sh" W1 gpu-quick 150 &
P1=$!
VIDLOADER_FAIL_WITHOUT_CUDA=1 timeout 170 python3 -m pytest -q -p no:cacheprovider -m cuda -x \
  tests/test_nvdec.py tests/test_loader_nvdec.py tests/test_memory_budget.py \
  tests/test_nvdec_processes.py 2>&1 | grep -v "^Svt" > "$OUT/cuda_tests.log"
grep -E "^FAILED|^ERROR|passed|failed" "$OUT/cuda_tests.log" | head -12
wait $P1
RES=/tmp/memcpy; rm -rf "$RES" && mkdir -p "$RES"
combo() {  # out-name workloads variants
  timeout 300 python3 -m vidloader.bench._combo_run --workloads $2 --scale gpu-quick \
    --data-dir /tmp/bench-data --workers 16 --variants $3 --warmup-s 3 --window-s 6 --windows 3 \
    --out $RES/$1.json 2>&1 | grep -v "^Svt" > $RES/$1.log
  grep -E "summary" $RES/$1.log | cut -c1-200
  echo "$1 done at ${SECONDS} s"
}
combo seq W1-sequential nvdec-nomemcpy,nvdec,nvdec-nomemcpy,nvdec,nvdec-nomemcpy,nvdec,nvdec-dec24,nvdec-dec32
combo random W1-random nvdec-nomemcpy,nvdec
python3 - "$RES" <<'PY' | tee "$OUT/summary.txt"
import glob, json, sys
for f in sorted(glob.glob(sys.argv[1] + "/*.json")):
    d = json.load(open(f))
    for wl, row in d.get("results", {}).items():
        for label, v in row.items():
            if "error" in v:
                print(wl, label, "error", v["error"]); continue
            print(f"{wl:14s} {label:18s} median {v['frames_per_s']:7.0f} min {v['frames_per_s_min']:7.0f} "
                  f"windows {[round(x) for x in v['frames_per_s_windows']]} nvdec {v.get('nvdec_util_pct', 0):.0f}% "
                  f"peak GPU {v.get('gpu_mem_peak_bytes', 0) / 2**30:.1f} GiB host {v.get('peak_host_memory_bytes', 0) / 2**30:.2f} GiB")
PY
tar -czf "$OUT/results.tgz" -C "$RES" .
rm -f $OUT/prepare_*.log
echo "done at ${SECONDS} s"
