#!/bin/bash
# Session 23, call 4: the NVDEC cuda tests after session 23's changes (decoder threads shared
# out by worker processes, plans and budgets over processes, one unit a process), the fault,
# reliability, combo and NVTX cuda tests, and the multicamera example's stream order on NVDEC
# (in the loader's process and in 2 worker processes), which session 22 changed without a GPU.
set -u
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/gpu.txt"
VIDLOADER_FAIL_WITHOUT_CUDA=1 timeout 200 python3 -m pytest -q -p no:cacheprovider -m cuda \
  tests/test_nvdec.py tests/test_loader_nvdec.py tests/test_nvdec_concealed.py \
  tests/test_nvdec_gpu_faults.py tests/test_reliability.py tests/test_combo.py tests/test_nvtx.py \
  2>&1 | grep -v "^Svt" > "$OUT/cuda_tests.log"
grep -E "^FAILED|^ERROR|passed|failed" "$OUT/cuda_tests.log" | head -12
echo "tests done at ${SECONDS} s"
for procs in 1 2; do
  timeout 90 python3 examples/multicamera/main.py --generate /tmp/mc --group_num 4 --num_workers 2 \
    --frame_read_type stream --backend nvdec --nvdec_processes $procs 2>&1 | grep -v "^Svt" \
    > "$OUT/multicamera_stream_nvdec_p$procs.log"
  echo "multicamera stream, nvdec_processes=$procs: rc ${PIPESTATUS[0]}"; tail -4 "$OUT/multicamera_stream_nvdec_p$procs.log"
done
echo "done at ${SECONDS} s"
