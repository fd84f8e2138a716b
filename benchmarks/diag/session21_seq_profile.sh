#!/bin/bash
# Session 21, call 7 (~6 min, carry .whl), issue 16 item 2: why one NVDEC process reads W1 in
# stream order at ~0.72 of the raw ceiling on this host (calls 4 and 6: 2,088-2,270 frames/s
# against pynvc-threads' 3,058, NVDEC 64-74% busy), and how worker processes do over three
# windows. (1) the raw ceiling (bench run, pynvc-threads) on sequential and relaxed;
# (2) `_combo_run --profile` of the default NVDEC loader (16 demux workers, as the bench runs
# it) on W1-sequential: its threads' stacks over three 4 s windows; (3) three windows each of
# variants on W1-sequential and W1-relaxed: one process with 8 demux workers, stacks of 16
# without frame cache, 8 decoders; 4 processes; 12 processes of 2 decoders.
set -u
source "$(dirname "$0")/device_prepare.sh" W1 gpu-quick 150
RES=/tmp/seq-prof; rm -rf "$RES" && mkdir -p "$RES"
for w in sequential relaxed; do
  timeout 60 python3 -m vidloader.bench run --scale gpu-quick --dataset W1 --data-dir /tmp/bench-data \
    --out "$RES/raw-$w" --workers 16 --no-plot --batches 300 --max-seconds 8 --timeout 50 \
    --workload $w --backends pynvc-threads 2>&1 | grep -E "^\[$w\]" | tail -1
done
combo() {  # out-name workloads variants [--profile]
  timeout 200 python3 -m vidloader.bench._combo_run --workloads $2 --scale gpu-quick \
    --data-dir /tmp/bench-data --workers 16 --variants $3 --warmup-s 3 --window-s 4 --windows 3 ${4:-} \
    --out $RES/$1.json 2>&1 | grep -v "^Svt" > $RES/$1.log
  grep -E "frames|windows" $RES/$1.log | cut -c1-220
  echo "$1 done at ${SECONDS} s"
}
combo profile W1-sequential nvdec --profile
python3 - $RES/profile.json <<'PY' | tee $OUT/profile.txt
import collections, json, sys
row = json.load(open(sys.argv[1]))["results"]["W1-sequential"]
for label, v in row.items():
    prof = v.get("profile", {}).get("timed", {})
    groups = collections.defaultdict(lambda: [collections.Counter(), collections.Counter(), 0])
    for name, t in prof.items():
        g = name.rstrip("0123456789_-") or name
        groups[g][2] += t["samples"]
        for f, share in t["ours"]:
            groups[g][0][f] += share * t["samples"]
        for f, share in t.get("leaf", []):
            groups[g][1][f] += share * t["samples"]
    for g, (ours, leaf, n) in sorted(groups.items(), key=lambda x: -x[1][2]):
        print(f"== {label} {g} ({n} samples)\n  ours: " + "; ".join(f"{f} {x / n:.2f}" for f, x in ours.most_common(10))
              + "\n  leaf: " + "; ".join(f"{f} {x / n:.2f}" for f, x in leaf.most_common(8)))
PY
combo seq-variants W1-sequential nvdec-w8,nvdec-stack16-nocache,nvdec-dec8,nvdec-p4,nvdec-p12-dec2
combo relaxed-variants W1-relaxed nvdec,nvdec-p4,nvdec-p12-dec2
python3 benchmarks/diag/bench_summary.py "$RES" > "$OUT/summary.txt" 2>&1
tar -czf "$OUT/results.tgz" -C "$RES" .
rm -f $OUT/prepare_*.log
echo "done at ${SECONDS} s"
