#!/bin/bash
# Next session, second call on the machine session16_w3_prepare.sh left W3 full on (issue 16):
# the stream order as GOPs of streams against whole batches at the full scale (250-batch
# epochs; the gpu scale's 60-batch epochs refill the GOP units every 1.7 s). ~5 min, carry .whl.
set -u
export PYTHONUNBUFFERED=1
ls -d /tmp/bench-data/W3-full* > /dev/null 2>&1 || { echo "W3 full is not here: run session16_w3_prepare.sh first, on the same warm machine"; exit 2; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt
AB_VARIANTS=gops,batches,gops-again timeout 500 python3 benchmarks/diag/stream_gops_ab.py full > $OUT/ab.log 2>&1
echo "ab rc $?"
grep -E "^== |^vidloader-nvdec" $OUT/ab.log
