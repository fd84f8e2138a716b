#!/bin/bash
# Session 24, call 7 (2 GPUs, ~300 s, carry .whl): why 2 GPUs give only 1.77x (multicam-stream)
# and 1.81x (sequential) of one in call 1, while the random orders give 1.95-1.97x. Each rank's
# loader against: the ranks alone (--sync none: no all-reduce per step, so no lockstep), and a
# deeper prefetch (prefetch=6: more decoded units held ahead, to absorb the other rank's
# jitter while waiting in the all-reduce). Stream orders first (the worst ratio), then
# sequential while time is left.
set -u
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export CUDA_DEVICE_ORDER=PCI_BUS_ID
DATA=/tmp/bench-data; RUNS=/tmp/mgpu2; rm -rf $RUNS; mkdir -p $RUNS
DEADLINE=${DEADLINE:-295}
nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
prep() {
  timeout 90 python3 -c "from vidloader.bench import prepare_dataset as p; p('$1', 'gpu-quick', data_dir='$DATA')" > /dev/null 2>&1
  echo "== [${SECONDS} s] prepared $1: rc $?"
}
run() {  # name nproc workload seconds max-batches [extra...]
  local name=$1 n=$2 w=$3 sec=$4 mb=$5 left=$((DEADLINE - SECONDS))
  shift 5
  if [ "$left" -lt 35 ]; then echo "== $name: skipped (${left} s left)"; return; fi
  timeout -k 5 $(( left < 60 ? left : 60 )) python3 -m torch.distributed.run --standalone \
    --nproc_per_node=$n benchmarks/multi_gpu.py --data $DATA --scale gpu-quick --backend nvdec \
    --num-workers 14 --workload $w --seconds $sec --max-batches $mb --out $RUNS/$name.json "$@" 2>&1 \
    | grep -E "frames/s in all|Error|error" | grep -v "^\*\*\*\*" | head -3
  echo "== [${SECONDS} s] $name: exit ${PIPESTATUS[0]}"
}
prep W3
run ms-2 2 multicam-stream 8 300
run ms-2-nosync 2 multicam-stream 8 300 --sync none
run ms-2-prefetch6 2 multicam-stream 8 300 --loader-option prefetch=6
run ms-1 1 multicam-stream 8 300
run ms-1-prefetch6 1 multicam-stream 8 300 --loader-option prefetch=6
prep W1
run seq-2-nosync 2 sequential 8 300 --sync none
run seq-2-prefetch6 2 sequential 8 300 --loader-option prefetch=6
run seq-2 2 sequential 8 300
python3 - $RUNS <<'PY' | tee "$OUT/summary.txt"
import glob, json, os, sys
for f in sorted(glob.glob(sys.argv[1] + "/*.json")):
    r = json.load(open(f))
    if r.get("status") != "ok":
        print(os.path.basename(f), r.get("status"), r.get("reasons")); continue
    g = r.get("gpus", {})
    print(f"{os.path.basename(f)[:-5]:16s} {r['total_frames_per_s']:8,.0f} frames/s  per rank "
          + ", ".join(f"{k['frames_per_s']:,.0f}" for k in r["ranks"])
          + f"  sync {r.get('sync')} options {r.get('loader_options')}  NVDEC "
          + "/".join(f"{v['nvdec_util_pct']:.0f}%" for v in g.values())
          + f"  GPU mem " + "/".join(f"{v['mem_peak_bytes']/2**30:.1f}" for v in g.values())
          + f"  exactly once {r['check']['exactly_once']}")
PY
tar -czf "$OUT/runs.tgz" -C /tmp mgpu2
echo "done at ${SECONDS} s"
