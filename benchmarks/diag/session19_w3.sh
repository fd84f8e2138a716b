#!/bin/bash
# Session 19 (~8 min, carry .whl), issue 16 item 3 (accvlab's workload): W3 (gpu scale: 10
# rigs × 6 cameras, HEVC 1600×900, GOP 30, 48 frames) in the multi-camera stream order at
# native size, GOPs of streams now also in NVDEC worker processes (nvdec_processes=K). First
# the cuda tests of the NVDEC loader (the streams test runs with demux workers and with 2
# processes) and of the batched resize (float16 products on CUDA); then
# `python -m vidloader.bench._combo_run --workloads W3-stream`: one NVDEC process with 16
# demux workers (separation mode, session 14's 1,632-1,716) against 2 / 4 / 6 / 8 processes,
# 3 windows of 4 s each, decoded per delivered frame and NVDEC use per variant.
set -u
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt
timeout 300 python3 -c "from vidloader.bench import prepare_dataset as p; p('W3', 'gpu', data_dir='/tmp/bench-data')" > $OUT/prepare_W3.log 2>&1 &
P1=$!
VIDLOADER_FAIL_WITHOUT_CUDA=1 timeout 200 python3 -m pytest -q -p no:cacheprovider -m cuda \
  tests/test_loader_nvdec.py tests/test_images_batched.py 2>&1 | grep -v "^Svt" > $OUT/cuda_tests.log
grep -E "^FAILED|^ERROR|passed|failed" $OUT/cuda_tests.log | head -20 | cut -c1-300
wait $P1; echo "prepared W3 rc $? at ${SECONDS} s"
timeout $((570 - SECONDS)) python3 -m vidloader.bench._combo_run --scale gpu --workers 16 \
  --workloads W3-stream --variants nvdec,nvdec-p2,nvdec-p4,nvdec-p6-dec4,nvdec-p8 \
  --windows 3 --window-s 4 --warmup-s 4 --out $OUT/w3_stream.json 2>&1 | grep -v "^Svt" > $OUT/w3_stream.log
grep summary $OUT/w3_stream.log | cut -c1-300
python3 - <<'PY'
import json, os
rows = json.load(open(os.path.join(os.environ["OUT"], "w3_stream.json")))["results"]["W3-stream"]
for k, v in rows.items():
    print(k, {x: v.get(x) for x in ("frames_per_s", "frames_per_s_min", "decoded_per_delivered",
                                    "nvdec_util_pct", "gpu_util_pct", "cpu_util_pct", "gpu_mem_peak_bytes",
                                    "peak_host_memory_bytes", "first_batch_s", "error")})
PY
echo "done at ${SECONDS} s"
