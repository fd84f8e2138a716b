#!/bin/bash
# Session 14 (issue 16, accvlab's workload): the multi-camera stream order on NVDEC as GOPs of
# streams against whole batches, W3 at the gpu scale, in one call (~6 min), after the NVDEC
# loader's cuda tests (the new stream test among them). Carry .whl.
set -u
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt
VIDLOADER_FAIL_WITHOUT_CUDA=1 timeout 150 python3 -m pytest -q -p no:cacheprovider -m cuda tests/test_loader_nvdec.py > $OUT/cuda_tests.log 2>&1
grep -E "^FAILED|^E  |passed|failed" $OUT/cuda_tests.log | head -10 | cut -c1-400
timeout 150 python3 -c "from vidloader.bench import prepare_dataset as p; p('W3', 'gpu', data_dir='/tmp/bench-data')" > $OUT/prepare_W3.log 2>&1
echo "prepared rc $?"
timeout 400 python3 benchmarks/diag/stream_gops_ab.py gpu > $OUT/ab.log 2>&1
echo "ab rc $?"
grep -E "^== |^vidloader-nvdec" $OUT/ab.log
python3 - <<'PY'
import glob, json, os
for path in sorted(glob.glob(os.path.join(os.environ["OUT"], "ab", "*", "*.json"))):
    for run in json.load(open(path)).get("runs", []):
        print(path.split("/ab/")[1], run.get("status"), round(run.get("frames_per_s") or 0),
              run.get("decoded_per_delivered"), run.get("nvdec_util_pct"),
              (run.get("peak_gpu_memory_bytes") or 0) >> 20, "MiB",
              (run.get("memory_plan") or {}).get("gpu_staging_buffers"))
PY
