#!/bin/bash
# Session 14 (issue 16): the W3 multi-camera stream at the full scale (200 frames a camera,
# 250-batch epochs: the gpu scale's 60-batch epochs refill the GOP units every 1.7 s), GOPs of
# streams against whole batches, in one call (~4 min). Carry .whl.
set -u
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt
start=$(date +%s)
timeout 240 python3 -c "from vidloader.bench import prepare_dataset as p; p('W3', 'full', data_dir='/tmp/bench-data')" > $OUT/prepare_W3.log 2>&1
echo "prepared rc $? in $(( $(date +%s) - start )) s"
AB_VARIANTS=gops,batches timeout 280 python3 benchmarks/diag/stream_gops_ab.py full > $OUT/ab.log 2>&1
echo "ab rc $?"
grep -E "^== |^vidloader-nvdec" $OUT/ab.log
python3 - <<'PY'
import glob, json, os
for path in sorted(glob.glob(os.path.join(os.environ["OUT"], "ab", "*", "*.json"))):
    for run in json.load(open(path)).get("runs", []):
        print(path.split("/ab/")[1], run.get("status"), round(run.get("frames_per_s") or 0),
              run.get("decoded_per_delivered"), run.get("nvdec_util_pct"),
              (run.get("peak_gpu_memory_bytes") or 0) >> 20, "MiB GPU",
              (run.get("torch_peak_allocated_bytes") or 0) >> 20, "MiB torch", run.get("first_batch_s"))
PY
