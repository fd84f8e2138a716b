#!/bin/bash
# Session 17, call 9 (~2.5 min, carry .whl): where the NVDEC loader's time goes on
# W4-clips-head now that it runs 4 decoder threads there (call 7: 2,581 frames/s, NVDEC 19%
# busy, SPDL 7,621): the loader process's threads sampled (--profile), the default and with
# stacks of 16 and no frame cache.
set -u
source "$(dirname "$0")/device_prepare.sh" W4 gpu 200
timeout 200 python3 -m vidloader.bench._combo_run --workloads W4-clips-head --scale gpu \
  --variants nvdec,nvdec-dec4-stack16-nocache --warmup-s 3 --window-s 5 --windows 3 --profile \
  --out $OUT/head_profile4.json 2>&1 | grep -v "^Svt" > $OUT/head_profile4.log
grep -E "summary" $OUT/head_profile4.log | cut -c1-200
python3 - $OUT/head_profile4.json <<'PY'
import collections, json, sys
row = json.load(open(sys.argv[1]))["results"]["W4-clips-head"]
for label, v in row.items():
    prof = v.get("profile", {}).get("timed", {})
    for group in ("vidloader-nvdec", "MainThread"):
        c, n = collections.Counter(), 0
        for name, t in prof.items():
            if not name.startswith(group):
                continue
            n += t["samples"]
            for f, share in t["ours"]:
                c[f] += share * t["samples"]
        print(f"== {label} {group} ({n} samples): " + "; ".join(f"{f} {x / n:.2f}" for f, x in c.most_common(8)))
PY
echo "done at ${SECONDS} s"
