#!/bin/bash
# Session 17, call 4 (~6 min, carry .whl), issue 16 item 1, W1 gpu-quick sequential reading:
# call 2 (session17-2) found memory_budget="3GiB" within 3 GiB on the GPU (2.92 GiB by
# nvidia-smi above the context, random frames at 0.92 of the default's pace) but sequential
# reading at 0.57 of the default (1,351 against 2,381 frames/s). Its plan: 12 decoders, one
# unit decoding, stacks of 2, no frame cache. Which knob costs it? gpu_memory_probe.py
# (sequential, 200 batches, no allocation history) with plans set by hand, the host's peak PSS
# split into the loader's process and its children (16 demux workers), and fewer demux workers.
set -u
source "$(dirname "$0")/device_prepare.sh" W1 gpu-quick
probe() {  # tag [probe arguments]
  local left=$((${DEADLINE:-470} - SECONDS))
  if [ "$left" -lt 30 ]; then echo "$1 not run: ${left} s left"; return; fi
  timeout 75 python3 benchmarks/diag/gpu_memory_probe.py --sampler sequential --batches 200 --warmup 20 \
    --no-history --tag "$1" "${@:2}" > $OUT/probe-$1.log 2>&1
  echo "$1 rc $? $(grep -E '^frames_per_s' $OUT/probe-$1.log) $(grep -E '^smi_loader_peak_gib' $OUT/probe-$1.log)" \
       "$(grep -E '^plan settings' $OUT/probe-$1.log | cut -c1-120) host $(grep -E '^host_peak_pss_gib' $OUT/probe-$1.log)"
}
probe default
probe budget3 --memory-budget 3GiB
probe d12-u2-s2 --decoders 12 --option units_decoding=2 --option stack_frames=2 --option frame_cache_bytes=0
probe d12-u1-s4 --decoders 12 --option units_decoding=1 --option stack_frames=4 --option frame_cache_bytes=0
probe d8-u2-s4 --decoders 8 --option units_decoding=2 --option stack_frames=4 --option frame_cache_bytes=0
probe d12-u2-s4 --decoders 12 --option units_decoding=2 --option stack_frames=4 --option frame_cache_bytes=0
probe default-w4 --workers 4
probe default-again
tar -czf $OUT/probes.tgz -C $OUT $(cd $OUT && ls gpu_memory-*.json probe-*.log)
rm -f $OUT/gpu_memory-*.json $OUT/probe-*.log
echo "done at ${SECONDS} s"
