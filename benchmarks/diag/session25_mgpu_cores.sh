#!/bin/bash
# Written in session 24; run in session 25 (session25-5, DEADLINE=400), kind nvidia-h200-x2 (32 cores; ~300 s,
# carry .whl): do the two ranks compete for the host's cores? Session 24 found each rank of a
# 2-GPU run slower than a lone rank on the stream orders (W3 stream 1.77x on H200s, 1.54x on
# H100s; W1 sequential 1.81x), with neither the lockstep nor a deeper prefetch the cause
# (call 7). Here each workload runs on one rank with all 32 cores, one rank pinned to 16 cores,
# two ranks free, and two ranks pinned to 16 cores each (multi_gpu.py --cores 16: a rank and
# its loader's workers on cores of their own). If one rank on 16 cores runs at the per-rank
# pace of two ranks, cores (or what they share: caches, memory bandwidth) are the limit.
# Also one rank beside 16 busy-looping processes on the other cores (ms-1-burn): if it slows
# too, the cores' clock (turbo falls as more cores work) or shared caches are the suspects;
# the cores' mean MHz is sampled every second during each run (mhz.log).
set -u
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export CUDA_DEVICE_ORDER=PCI_BUS_ID
DATA=/tmp/bench-data; RUNS=/tmp/mgpu3; rm -rf $RUNS; mkdir -p $RUNS
DEADLINE=${DEADLINE:-420}
nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"; nproc
prep() {
  timeout 90 python3 -c "from vidloader.bench import prepare_dataset as p; p('$1', 'gpu-quick', data_dir='$DATA')" > /dev/null 2>&1
  echo "== [${SECONDS} s] prepared $1: rc $?"
}
mhz() { awk '/MHz/ {s += $4; n++} END {if (n) printf "%.0f", s / n}' /proc/cpuinfo; }
run() {  # name nproc workload [extra...]
  local name=$1 n=$2 w=$3 left=$((DEADLINE - SECONDS))
  shift 3
  if [ "$left" -lt 35 ]; then echo "== $name: skipped (${left} s left)"; return; fi
  ( while sleep 1; do echo "$name $(mhz)"; done ) >> "$OUT/mhz.log" &
  local sampler=$!
  timeout -k 5 $(( left < 60 ? left : 60 )) python3 -m torch.distributed.run --standalone \
    --nproc_per_node=$n benchmarks/multi_gpu.py --data $DATA --scale gpu-quick --backend nvdec \
    --num-workers 14 --workload $w --seconds 8 --max-batches 300 --out $RUNS/$name.json "$@" 2>&1 \
    | grep -E "frames/s in all|Error" | head -3
  local rc=${PIPESTATUS[0]}
  kill $sampler 2>/dev/null
  echo "== [${SECONDS} s] $name: exit $rc, mean MHz $(awk -v n=$name '$1 == n {s += $2; k++} END {if (k) printf "%.0f", s / k}' "$OUT/mhz.log")"
}
burn() {  # busy loops on cores 16-31 while "$@" runs
  local pids=()
  for c in $(seq 16 31); do taskset -c $c python3 -c "while True: pass" & pids+=($!); done
  "$@"
  kill "${pids[@]}" 2>/dev/null; wait "${pids[@]}" 2>/dev/null
}
prep W3
run ms-1 1 multicam-stream
run ms-1-c16 1 multicam-stream --cores 16
burn run ms-1-burn 1 multicam-stream --cores 16 --note "16 busy loops on cores 16-31"
run ms-2 2 multicam-stream
run ms-2-c16 2 multicam-stream --cores 16
prep W1
run seq-1 1 sequential
run seq-1-c16 1 sequential --cores 16
run seq-2 2 sequential
run seq-2-c16 2 sequential --cores 16
python3 benchmarks/multi_gpu.py --summarize $RUNS --out "$OUT/multi_gpu.json" | tee "$OUT/summary.txt"
tar -czf "$OUT/runs.tgz" -C /tmp mgpu3
echo "done at ${SECONDS} s"
