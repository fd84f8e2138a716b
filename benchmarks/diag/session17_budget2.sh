#!/bin/bash
# Session 17, call 6 (~9 min, carry .whl), issue 16 item 1 after call 4 (session17-4): the
# budget now lowers decoders to 8 before stacks and units, its plan fills 92% of the budget,
# and NVDEC's surfaces count 56 pictures a decoder. memory_budget="3GiB" (planned: 8 decoders,
# 4 units, stacks of 4, no frame cache) beside the default (16 decoders) and the default with 8
# decoders, on sequential and uniform random W1 (gpu_memory_probe.py, no allocation history).
# First, W4-clips-head (call 5, session17-5: 16 / 8 / 4 decoders with stacks of 16 and no frame
# cache gave 2,024 / 2,318 / 2,865 frames/s): 2 decoders, and 4 with the default stacks and cache.
set -u
source "$(dirname "$0")/device_prepare.sh" W4 gpu 200
timeout 150 python3 -m vidloader.bench._combo_run --workloads W4-clips-head --scale gpu \
  --variants nvdec-dec2-stack16-nocache,nvdec-dec4,nvdec-dec4-nocache \
  --warmup-s 3 --window-s 5 --windows 3 --out $OUT/head_decoders.json 2>&1 \
  | grep -v "^Svt" > $OUT/head_decoders.log
grep -E "summary" $OUT/head_decoders.log | cut -c1-200
source "$(dirname "$0")/device_prepare.sh" W1 gpu-quick
probe() {  # tag sampler batches [probe arguments]
  local left=$((${DEADLINE:-545} - SECONDS))
  if [ "$left" -lt 30 ]; then echo "$1 not run: ${left} s left"; return; fi
  timeout 80 python3 benchmarks/diag/gpu_memory_probe.py --sampler "$2" --batches "$3" --warmup 10 \
    --no-history --tag "$1" "${@:4}" > $OUT/probe-$1.log 2>&1
  echo "$1 rc $? $(grep -E '^frames_per_s' $OUT/probe-$1.log) $(grep -E '^smi_loader_peak_gib' $OUT/probe-$1.log)" \
       "$(grep -E '^plan settings' $OUT/probe-$1.log | cut -c1-120) plan $(grep -E '^plan_total_gib' $OUT/probe-$1.log) host $(grep -E '^host_peak_pss_gib' $OUT/probe-$1.log)"
}
probe seq-default sequential 200
probe seq-dec8 sequential 200 --decoders 8
probe seq-budget3 sequential 200 --memory-budget 3GiB
probe rnd-default random 50
probe rnd-dec8 random 50 --decoders 8
probe rnd-budget3 random 50 --memory-budget 3GiB
probe seq-dec4 sequential 200 --decoders 4
probe rnd-dec4 random 50 --decoders 4
tar -czf $OUT/probes.tgz -C $OUT $(cd $OUT && ls gpu_memory-*.json probe-*.log)
rm -f $OUT/gpu_memory-*.json $OUT/probe-*.log
echo "done at ${SECONDS} s"
