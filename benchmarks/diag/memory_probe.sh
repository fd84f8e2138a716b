#!/bin/bash
# Issue 16, item 1 (GPU memory), on one GPU in one device call (~6 min on the H100): where the
# NVDEC loader's memory goes, against its plan, with and without memory_budget, on W1
# (1080p, batch 128 at 224², 16 demux workers, 16 decoders). Each probe writes
# $OUT/gpu_memory-<tag>.json and a log; the summary lines are printed.
#   random-default / random-3GiB: the workload (uniform random frames), with history
#   sequential-default / sequential-3GiB: session9-6's workload (whole GOPs wanted)
#   *-fps: the same without allocation history, for frames/s (history slows the host)
#   random-cublas4: CUBLAS_WORKSPACE_CONFIG=:4096:1 (4 MiB per workspace instead of 32)
set -u
OUT=${OUT:-/tmp/vidloader-gpu-out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/gpu.txt"
timeout 150 python3 -c "from vidloader.bench import prepare_dataset as p; p('W1', 'gpu-quick', data_dir='/tmp/bench-data')" > /dev/null 2>&1
probe() {  # tag seconds args...
  local tag=$1 seconds=$2
  shift 2
  timeout "$seconds" python3 benchmarks/diag/gpu_memory_probe.py --tag "$tag" "$@" 2>&1 \
    | grep -v "^Svt" > "$OUT/gpu_memory-$tag.log"
  echo "== $tag: $*"
  grep -E "^(plan settings|plan_total_gib|plan_torch_gib|frames_per_s|gpu_staging|frames_held_peak|smi_loader_peak_gib|torch_peak_allocated_gib|torch_peak_reserved_gib|outside_torch_peak_gib|after_shutdown_allocated_gib|peak_by_component_gib)" \
    "$OUT/gpu_memory-$tag.log" | cut -c1-220
  grep -E "Error|Traceback" "$OUT/gpu_memory-$tag.log" | head -3
}
# PROBES picks the probes (default all; worst case about 10 minutes with the dataset).
PROBES=${PROBES-"random-default random-3GiB sequential-default sequential-3GiB random-default-fps random-3GiB-fps random-cublas4"}
for p in $PROBES; do
  case $p in
    random-default) probe $p 110 --batches 60 ;;
    random-3GiB) probe $p 110 --batches 60 --memory-budget 3GiB ;;
    sequential-default) probe $p 70 --batches 60 --sampler sequential ;;
    sequential-3GiB) probe $p 70 --batches 60 --sampler sequential --memory-budget 3GiB ;;
    random-default-fps) probe $p 80 --batches 80 --warmup 16 --no-history ;;
    random-3GiB-fps) probe $p 80 --batches 80 --warmup 16 --no-history --memory-budget 3GiB ;;
    random-cublas4) (export CUBLAS_WORKSPACE_CONFIG=:4096:1; probe $p 70 --batches 40) ;;
    *) echo "unknown probe $p" ;;
  esac
done
