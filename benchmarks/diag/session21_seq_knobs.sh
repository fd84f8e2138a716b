#!/bin/bash
# Session 21, call 8 (~7 min, carry .whl), issue 16 item 2: call 7 read W1 in stream order in
# one NVDEC process at 2,472 frames/s with stacks of 16 and no frame cache against 1,837 with
# the defaults (stacks of 8, 256 MiB frame cache), and its profile put 17% of the decoder
# threads' samples in the per-frame copy into the stack. Which of the two, and at what cost
# to uniform random frames? (1) the raw ceiling on sequential; (2) three 4 s windows each on
# W1-sequential: default, no frame cache, stacks of 16, both; 4 processes with both;
# (3) W1-relaxed in 4 processes with both; (4) W1-random: default against both.
set -u
source "$(dirname "$0")/device_prepare.sh" W1 gpu-quick 150
RES=/tmp/seq-knobs; rm -rf "$RES" && mkdir -p "$RES"
for w in sequential relaxed; do
  timeout 60 python3 -m vidloader.bench run --scale gpu-quick --dataset W1 --data-dir /tmp/bench-data \
    --out "$RES/raw-$w" --workers 16 --no-plot --batches 300 --max-seconds 8 --timeout 50 \
    --workload $w --backends pynvc-threads 2>&1 | grep -E "^\[$w\]" | tail -1
done
combo() {  # out-name workloads variants
  timeout 260 python3 -m vidloader.bench._combo_run --workloads $2 --scale gpu-quick \
    --data-dir /tmp/bench-data --workers 16 --variants $3 --warmup-s 3 --window-s 4 --windows 3 \
    --out $RES/$1.json 2>&1 | grep -v "^Svt" > $RES/$1.log
  grep -E "summary" $RES/$1.log | cut -c1-200
  echo "$1 done at ${SECONDS} s"
}
combo seq W1-sequential nvdec,nvdec-nocache,nvdec-stack16,nvdec-stack16-nocache,nvdec-p4-stack16-nocache
combo relaxed W1-relaxed nvdec-stack16-nocache,nvdec-p4-stack16-nocache
combo random W1-random nvdec,nvdec-stack16-nocache
python3 - "$RES" <<'PY' | tee "$OUT/summary.txt"
import glob, json, sys
for f in sorted(glob.glob(sys.argv[1] + "/*.json")):
    d = json.load(open(f))
    for wl, row in d.get("results", {}).items():
        for label, v in row.items():
            if "error" in v:
                print(wl, label, "error", v["error"]); continue
            print(f"{wl:14s} {label:26s} median {v['frames_per_s']:7.0f} min {v['frames_per_s_min']:7.0f} "
                  f"windows {[round(x) for x in v['frames_per_s_windows']]} nvdec {v.get('nvdec_util_pct', 0):.0f}% "
                  f"peak GPU {v.get('gpu_mem_peak_bytes', 0) / 2**30:.1f} GiB host {v.get('peak_host_memory_bytes', 0) / 2**30:.2f} GiB")
PY
tar -czf "$OUT/results.tgz" -C "$RES" .
rm -f $OUT/prepare_*.log
echo "done at ${SECONDS} s"
