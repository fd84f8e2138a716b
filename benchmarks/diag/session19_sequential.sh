#!/bin/bash
# Session 19 (~7 min, carry .whl), issue 16 item 2: sequential reading and GopShuffle against
# the raw NVDEC ceiling (pynvc-threads: PyNvVideoCodec on 16 threads), with NVDEC in one
# process (vidloader-nvdec) and in 12 worker processes of 2 decoder threads
# (vidloader-nvdec-p12). `vidloader bench run` on W1 (gpu-quick: 100 videos, 1080p H.264,
# GOP 30, 2 s), each backend in its own command, sequential twice in alternation, relaxed once.
set -u
export PYTHONUNBUFFERED=1
DEADLINE=${DEADLINE:-560}
RES=/tmp/seq-bench; rm -rf $RES; mkdir -p $RES
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt
timeout 200 python3 -c "from vidloader.bench import prepare_dataset as p; p('W1', 'gpu-quick', data_dir='/tmp/bench-data')" > /dev/null 2>&1
echo "prepared W1 rc $? at ${SECONDS} s"
bench() {  # workload backend round
  local left=$((DEADLINE - SECONDS))
  if [ "$left" -lt 45 ]; then echo "[$1] $2 round $3 not run: ${left} s left" | tee -a $OUT/bench.log; return; fi
  timeout 70 python3 -m vidloader.bench run --scale gpu-quick --dataset W1 --data-dir /tmp/bench-data \
    --out $RES/$1-$2-$3 --workers 16 --no-plot --batches 300 --max-seconds 8 --timeout 60 \
    --workload $1 --backends $2 2>&1 | grep -v "^Svt" >> $OUT/bench.log
  grep -E "^\[$1\] $2 \.\.\." $OUT/bench.log | tail -1
}
for r in 1 2; do for b in pynvc-threads vidloader-nvdec vidloader-nvdec-p12; do bench sequential $b $r; done; done
for b in pynvc-threads vidloader-nvdec vidloader-nvdec-p12; do bench relaxed $b 1; done
python3 benchmarks/diag/bench_summary.py $RES > $OUT/summary.txt 2>&1; tail -14 $OUT/summary.txt
tar -czf $OUT/bench.tgz -C $RES .
echo "done at ${SECONDS} s"
