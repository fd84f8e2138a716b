#!/bin/bash
# Session 17, call 5 (~6 min, carry .whl): the NVDEC loader on SPDL's Kinetics setting
# (W4-clips-head) after call 3's profile (session17-3): its 16 decoder threads spend their time
# in Python under the GIL: copying each frame into its stack (20%), converting stacks of 8
# (two per 16-frame clip: ~30% with the sink), putting frames into a frame cache no clip
# repeat ever hits (10%). Here the knobs that cut that work without a code change: stacks of
# 16 (one conversion per clip), no frame cache, both, both with 8 and 4 decoders; the default twice.
set -u
source "$(dirname "$0")/device_prepare.sh" W4 gpu 200
timeout 480 python3 -m vidloader.bench._combo_run --workloads W4-clips-head --scale gpu \
  --variants nvdec,nvdec-stack16,nvdec-nocache,nvdec-stack16-nocache,nvdec-dec8-stack16-nocache,nvdec-dec4-stack16-nocache,nvdec \
  --warmup-s 4 --window-s 5 --windows 3 --out $OUT/head_knobs.json 2>&1 \
  | grep -v "^Svt" > $OUT/head_knobs.log
grep -E "summary" $OUT/head_knobs.log | cut -c1-260
echo "done at ${SECONDS} s"
