#!/bin/bash
# Session 20, call 4 (~5 min, carry .whl), issue 16 item 1. Call 2 ran W1 uniform random
# frames faster with fewer demux workers (4: 436, 8: 387, 16: 302 frames/s, H100) when the
# packets ahead were bounded by the worker count only; now they are bounded by
# demux_ahead_bytes (default 512 MiB). gpu_memory_probe.py on W1 gpu-quick (1080p, batch 128
# at 224^2, 16 decoders) with 4 / 8 / 16 demux workers, for uniform random frames, sequential
# reading and GopShuffle (relaxed), at the default bound; GopShuffle also with no bound (its
# block units are the largest: does the bound starve the decoders?).
set -u
source "$(dirname "$0")/device_prepare.sh" W1 gpu-quick 150
probe() {  # tag sampler workers [demux_ahead_bytes]
  timeout 80 python3 benchmarks/diag/gpu_memory_probe.py --sampler $2 --workers $3 --batches ${5:-50} \
    --warmup 10 --no-history --tag $1 ${4:+--option demux_ahead_bytes=$4} > $OUT/probe-$1.log 2>&1
  echo "$1 rc $? at ${SECONDS} s: $(grep -E '^frames_per_s|^smi_loader_peak_gib|^host_peak_pss_gib|^demux_ahead_peak_gib' $OUT/probe-$1.log | tr '\n' ' ')"
}
probe rnd-4 random 4
probe rnd-8 random 8
probe rnd-16 random 16
probe seq-4 sequential 4 "" 120
probe seq-8 sequential 8 "" 120
probe seq-16 sequential 16 "" 120
probe gop-16 relaxed 16 "" 120
probe gop-16-none relaxed 16 none 120
rm -f $OUT/prepare_*.log
tar -czf $OUT/probes.tgz -C $OUT $(cd $OUT && ls gpu_memory-*.json probe-*.log) && \
  rm -f $OUT/gpu_memory-*.json $OUT/probe-*.log  # a call brings back 8 files at most
echo "done at ${SECONDS} s"
