#!/bin/bash
# Session 17, call 3 (~6 min, carry .whl): why NVDEC is slow on SPDL's Kinetics setting (issue 16
# item 4). In call 1 (session17-1) the bench's clips-head gave SPDL 7,710 frames/s (NVDEC 82%
# busy) against vidloader-nvdec 1,755 (NVDEC 13%, 2 of 16 cores busy): bound by neither engine.
# Here the loader process's threads are sampled (--profile) on W4-clips-head (each video's first
# 16 frames, once each over 40 hard-linked repeats of W4), with NVDEC settings that change how
# much work is queued on the decoders, and the status tap off; the CPU backend beside them.
set -u
source "$(dirname "$0")/device_prepare.sh" W4 gpu 200
timeout 420 python3 -m vidloader.bench._combo_run --workloads W4-clips-head --scale gpu \
  --variants nvdec,nvdec-notap,nvdec-units16,nvdec-la1-units16,nvdec-units8,nvdec-dec8,cpu \
  --warmup-s 4 --window-s 5 --windows 3 --profile --out $OUT/head_nvdec.json 2>&1 \
  | grep -v "^Svt" > $OUT/head_nvdec.log
grep -E "summary" $OUT/head_nvdec.log | cut -c1-260
python3 - $OUT/head_nvdec.json <<'PY'
import collections, json, re, sys
row = json.load(open(sys.argv[1]))["results"]["W4-clips-head"]
for label in ("nvdec", "nvdec-notap", "cpu"):
    prof = (row.get(label) or {}).get("profile", {}).get("timed")
    if not prof:
        continue
    print(f"== profile {label}: thread (samples): top 'ours' frames | top leaves")
    groups = collections.defaultdict(lambda: [0, collections.Counter(), collections.Counter()])
    for name, t in prof.items():
        g = groups[re.sub(r"[-_ ]?\d+", "#", name)]
        g[0] += t["samples"]
        for key, i in (("ours", 1), ("leaf", 2)):
            for frame, share in t[key]:
                g[i][frame] += share * t["samples"]
    for name, (n, ours, leaf) in sorted(groups.items(), key=lambda kv: -kv[1][0]):
        top = lambda c: "; ".join(f"{f} {v / n:.2f}" for f, v in c.most_common(5))
        print(f"{name} ({n}): {top(ours)} | {top(leaf)}"[:600])
PY
echo "done at ${SECONDS} s"
