#!/bin/bash
# Issue 19, one call on a 2-GPU machine (nvidia-h200-x2: 32 cores): vidloader's NVDEC loader
# on 1 and 2 GPUs under torchrun (benchmarks/multi_gpu.py), each rank on its own GPU, with a
# training step and an all-reduce after every batch.
#   PYTHONPATH=$PWD/src[:$PWD/.site] OUT=/some/dir bash benchmarks/multi_gpu.sh
# Steps, in order (MGPU_STEPS picks and orders them): the two datasets (W1 and W3 at
# $MGPU_SCALE, PyAV), then `exact` (2 ranks, one whole epoch of 4 batches per rank of random
# frames: the union must be the epoch, each sample once, equal batch counts), then per
# workload a 1-rank and a 2-rank run back to back (random, sequential, multicam-stream,
# multicam-random), then `contiguous`: sequential and multicam-stream again on 2 ranks with
# contiguous shards (the library interleaves positions r, r+W, ... between ranks, so on a
# stream-order sampler each rank decodes the GOPs the other also decodes), then the table.
# Every step has its own time limit, cut to what is left of MGPU_DEADLINE_S (default 470 s
# from the start); a step that cannot have 30 s is skipped. Expected: ~7 minutes in all.
# Out: $OUT/multi_gpu.log (everything), $OUT/multi_gpu.json (table + every run's JSON),
# $OUT/runs.tgz (the per-run JSON files, kept out of $OUT: few files come back from a call).
# MGPU_EXTRA: more arguments for every run (a CPU test: MGPU_BACKEND=cpu MGPU_SCALE=tiny
# MGPU_WORKERS=1 MGPU_EXTRA="--batch-size 12").
set -u
OUT=${OUT:-/tmp/vidloader-mgpu-out}
RUNS=${MGPU_RUNS:-/tmp/vidloader-mgpu-runs}
rm -rf "$RUNS"
mkdir -p "$OUT" "$RUNS"
LOG="$OUT/multi_gpu.log"
export PYTHONUNBUFFERED=1
# Keep NVLink multicast off (the lending rules); nvidia-smi's GPU index = the CUDA index.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export CUDA_DEVICE_ORDER=PCI_BUS_ID
DATA=${MGPU_DATA:-/tmp/bench-data}
SCALE=${MGPU_SCALE:-gpu-quick}
BACKEND=${MGPU_BACKEND:-nvdec}
# CPU demux workers per rank: 14 (2 ranks on 32 cores leave 2 cores for the ranks' own
# threads); the 1-rank runs use the same count, so the comparison is per GPU.
WORKERS=${MGPU_WORKERS:-14}
NPROC=${MGPU_NPROC:-2}
DEADLINE=${MGPU_DEADLINE_S:-470}
# `contiguous` is left out by default: the library shards sequential orders, and the bench's
# multicam stream order, in contiguous blocks since session 7.
STEPS=${MGPU_STEPS-"exact random sequential multicam-stream multicam-random"}
START=$(date +%s)
elapsed() { echo $(( $(date +%s) - START )); }
say() { echo "== [$(elapsed) s] $*" | tee -a "$LOG"; }

# limit SECONDS: the step's own limit, cut to what is left before the deadline ("" to skip).
limit() {
  local left=$(( DEADLINE - $(elapsed) ))
  if [ "$left" -lt 30 ]; then echo ""; elif [ "$left" -lt "$1" ]; then echo "$left"; else echo "$1"; fi
}

say "multi_gpu.sh: scale $SCALE, backend $BACKEND, $WORKERS workers per rank, steps: $STEPS"
{ nvidia-smi --query-gpu=index,name,pci.bus_id,driver_version,memory.total --format=csv || true
  nproc; python3 -c "import torch, av; print('torch', torch.__version__, 'cuda', torch.version.cuda,
'gpus', torch.cuda.device_count(), 'nccl', torch.cuda.nccl.version() if torch.cuda.is_available() else None, 'av', av.__version__)"
  python3 -c "import PyNvVideoCodec as n; print('PyNvVideoCodec', getattr(n, '__version__', '?'))" || true
  python3 -c "import tqdm" 2>/dev/null || echo "WARNING: no tqdm: the datasets are encoded one by one (slow)"
} 2>&1 | tee -a "$LOG"

say "datasets W1 and W3 ($SCALE) into $DATA"
timeout -k 5 200 python3 - "$DATA" "$SCALE" <<'EOF' 2>&1 | grep -v "generating videos" | tee -a "$LOG"
import sys, time
from vidloader.bench._datasets import load_index, prepare_dataset
for name in ("W1", "W3"):
    t = time.monotonic()
    dataset = prepare_dataset(name, sys.argv[2], data_dir=sys.argv[1])
    index = load_index(dataset)
    print(f"{name}: {len(index)} videos, {index.total_frames} frames, "
          f"{time.monotonic() - t:.0f} s (generated and indexed)", flush=True)
EOF

# run NAME NPROC LIMIT ARGS...: one torchrun launch, its JSON in $RUNS/NAME.json
run() {
  local name=$1 n=$2 t
  t=$(limit "$3")
  shift 3
  if [ -z "$t" ]; then say "$name: skipped (deadline)"; return; fi
  say "$name: $n rank(s), limit $t s"
  timeout -k 10 "$t" python3 -m torch.distributed.run --standalone --nproc_per_node="$n" \
    benchmarks/multi_gpu.py --data "$DATA" --scale "$SCALE" --backend "$BACKEND" \
    --num-workers "$WORKERS" --out "$RUNS/$name.json" "$@" ${MGPU_EXTRA:-} 2>&1 \
    | grep -v -e "^\*\*\*\*" -e "OMP_NUM_THREADS" | tee -a "$LOG"
  say "$name: exit ${PIPESTATUS[0]}"
}

# Per workload: how long the timed window runs (s), at most how many timed batches per rank,
# and the step's limit (s). The window is at least 3 production cycles of the loader (48
# batches with the NVDEC defaults), as in `vidloader bench run`.
pair() {  # workload seconds max-batches limit [extra args]
  local w=$1 s=$2 m=$3 t=$4
  shift 4
  run "$w-1" 1 "$t" --workload "$w" --seconds "$s" --max-batches "$m" "$@"
  run "$w-$NPROC" "$NPROC" "$t" --workload "$w" --seconds "$s" --max-batches "$m" "$@"
}

for step in $STEPS; do
  case $step in
    exact) run "exact-random-$NPROC" "$NPROC" 60 --workload random --record --batches 4 ;;
    random) pair random 12 120 75 ;;
    sequential) pair sequential 8 300 60 ;;
    multicam-stream) pair multicam-stream 8 300 60 ;;
    multicam-random) pair multicam-random 8 200 70 ;;
    contiguous)
      for w in sequential multicam-stream; do
        run "$w-contiguous-$NPROC" "$NPROC" 60 --workload "$w" --seconds 8 --max-batches 300 \
          --shard contiguous
      done ;;
    *) say "unknown step '$step' (exact random sequential multicam-stream multicam-random contiguous)" ;;
  esac
done

say "summary"
python3 benchmarks/multi_gpu.py --summarize "$RUNS" --out "$OUT/multi_gpu.json" 2>&1 | tee -a "$LOG"
tar -czf "$OUT/runs.tgz" -C "$(dirname "$RUNS")" "$(basename "$RUNS")"
if [ "${MGPU_STARTUP:-1}" = 1 ] && [ "$BACKEND" = nvdec ]; then
  # Issue 14, item 2: first batch with 16 workers on the GPU machine (GPU 0, W1 as above).
  say "start-up: 3 loaders with 16 workers, one after the other"
  VIDLOADER_BENCH_DATA=$DATA timeout -k 5 80 python3 benchmarks/startup.py --backend nvdec \
    --workers 16 --scale "$SCALE" --out "$OUT/startup.json" 2>&1 | grep "^loader" | tee -a "$LOG"
fi
say "done"
