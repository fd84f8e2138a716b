#!/bin/bash
# Session 21, call 10 (~7 min, carry .whl): the new NVDEC defaults (stacks of 16, no frame
# cache: variant "nvdec") against the old (stacks of 8, 256 MiB frame cache: "nvdec-old"),
# alternated in one process run, three 6 s windows each: W1-sequential three times each,
# W4-clips-head twice each. Calls 7-8 gave 2,463-2,472 against 1,837-2,264 on W1-sequential
# with the new settings passed explicitly; call 9's default run gave 2,134 (windows 1,715 to
# 2,448) and W4 clips-head 2,335 against 2,721 in call 4: is the change real on this host?
set -u
source "$(dirname "$0")/device_prepare.sh" W1 gpu-quick 150
timeout 60 python3 -c "from vidloader.bench import prepare_dataset as p; p('W4', 'gpu-quick', data_dir='/tmp/bench-data')" > /dev/null 2>&1
RES=/tmp/defaults-ab; rm -rf "$RES" && mkdir -p "$RES"
combo() {  # out-name workloads variants
  timeout 280 python3 -m vidloader.bench._combo_run --workloads $2 --scale gpu-quick \
    --data-dir /tmp/bench-data --workers 16 --variants $3 --warmup-s 3 --window-s 6 --windows 3 \
    --out $RES/$1.json 2>&1 | grep -v "^Svt" > $RES/$1.log
  grep -E "summary" $RES/$1.log | cut -c1-200
  echo "$1 done at ${SECONDS} s"
}
combo seq W1-sequential nvdec-old,nvdec,nvdec-old,nvdec,nvdec-old,nvdec
combo head W4-clips-head nvdec-old,nvdec,nvdec-old,nvdec
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
tar -czf "$OUT/results.tgz" -C "$RES" .
rm -f $OUT/prepare_*.log
echo "done at ${SECONDS} s"
