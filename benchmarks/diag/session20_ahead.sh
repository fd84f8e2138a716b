#!/bin/bash
# Session 20, call 3 (~8 min, carry .whl), issue 16 item 1. Call 2 found the host memory of
# uniform random frames mostly in segments the demux workers had sent and the loader had not
# yet received (4.3 GiB, in no process's PSS), and that fewer workers ran faster there. The
# loader now holds units back so the packets demuxed ahead of NVDEC stay within
# nvdec_options["demux_ahead_bytes"] (default 1 GiB). First the NVDEC loader's cuda tests;
# then gpu_memory_probe.py on W1 gpu-quick (1080p, batch 128 at 224^2), 16 demux workers:
# uniform random frames with no bound (the behaviour before), 1 GiB (the default), 512 and
# 256 MiB, 2 GiB; sequential reading with no bound and with the default.
set -u
source "$(dirname "$0")/device_prepare.sh" W1 gpu-quick 150 &
P1=$!
VIDLOADER_FAIL_WITHOUT_CUDA=1 timeout 200 python3 -m pytest -q -p no:cacheprovider -m cuda \
  tests/test_loader_nvdec.py tests/test_nvdec.py tests/test_combo.py 2>&1 | grep -v "^Svt" > $OUT/cuda_tests.log
grep -E "^FAILED|^ERROR|passed|failed|no tests ran" $OUT/cuda_tests.log | head -20 | cut -c1-300
wait $P1
probe() {  # tag sampler demux_ahead_bytes
  timeout 90 python3 benchmarks/diag/gpu_memory_probe.py --sampler $2 --workers 16 --batches 50 \
    --warmup 10 --no-history --tag $1 --option demux_ahead_bytes=$3 > $OUT/probe-$1.log 2>&1
  echo "$1 rc $? at ${SECONDS} s: $(grep -E '^frames_per_s|^smi_loader_peak_gib|^host_peak_pss_gib|^demux_ahead_peak_gib' $OUT/probe-$1.log | tr '\n' ' ')"
}
probe rnd-none random none
probe rnd-1g random 1073741824
probe rnd-512m random 536870912
probe rnd-256m random 268435456
probe rnd-2g random 2147483648
probe seq-none sequential none
probe seq-1g sequential 1073741824
probe rnd-1g-b random 1073741824
probe rnd-none-b random none
rm -f $OUT/prepare_*.log
tar -czf $OUT/probes.tgz -C $OUT $(cd $OUT && ls gpu_memory-*.json probe-*.log) && \
  rm -f $OUT/gpu_memory-*.json $OUT/probe-*.log  # a call brings back 8 files at most
echo "done at ${SECONDS} s"
