#!/bin/bash
# Session 18, call 6 (~6 min, carry .whl), issue 16 item 4: the NVDEC loader cuda tests after
# the frame cache's count mend; then W4-clips-head with NVDEC in more processes of fewer
# decoder threads (session18-4: 8 processes of 4 threads 5,407 frames/s, 4 of 8 1,221).
set -u
export PYTHONUNBUFFERED=1
RES=/tmp/procs-bench; rm -rf $RES; mkdir -p $RES
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt
timeout 200 python3 -c "from vidloader.bench import prepare_dataset as p; p('W4', 'gpu', data_dir='/tmp/bench-data')" > /dev/null 2>&1 &
P1=$!
VIDLOADER_FAIL_WITHOUT_CUDA=1 timeout 200 python3 -m pytest -q -p no:cacheprovider -m cuda \
  tests/test_loader_nvdec.py tests/test_nvdec_processes.py tests/test_nvdec.py 2>&1 | grep -v "^Svt" > $OUT/cuda_tests.log
grep -E "^FAILED|^ERROR|passed|failed" $OUT/cuda_tests.log | head -20 | cut -c1-300
wait $P1; echo "prepared W4 rc $? at ${SECONDS} s"
timeout 330 python3 -m vidloader.bench._combo_run --workloads W4-clips-head --scale gpu \
  --variants nvdec,nvdec-p8,nvdec-p8-dec2,nvdec-p12-dec2,nvdec-p16-dec1,nvdec-p12 --warmup-s 4 \
  --window-s 5 --windows 3 --out $OUT/head_procs2.json 2>&1 | grep -v "^Svt" > $OUT/head_procs2.log
grep -E "summary" $OUT/head_procs2.log | cut -c1-260
python3 - <<'PY'
import json, os
d = json.load(open(os.environ["OUT"] + "/head_procs2.json"))["results"]["W4-clips-head"]
for k, v in d.items():
    print(k, {x: v.get(x) for x in ("frames_per_s", "gpu_mem_peak_bytes", "peak_host_memory_bytes", "nvdec_util_pct", "cpu_util_pct", "first_batch_s")})
PY
echo "done at ${SECONDS} s"
