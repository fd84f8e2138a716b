# Session 8, call 9: the GPU leak after process-wide decoder threads, the GPU-fault tests and
# every cuda test, then the combo on W4 clips with its parts in one call.
set -u
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/gpu.txt
timeout 90 python3 benchmarks/diag/gpu_leak_probe.py 2 2>&1 | grep -v -e "^Svt" -e Warning -e "o.is_cuda" > $OUT/leak.log; cat $OUT/leak.log | cut -c1-200
VIDLOADER_FAIL_WITHOUT_CUDA=1 timeout 240 python3 -m pytest -q -p no:cacheprovider -m cuda tests/ 2>&1 | grep -v "^Svt" > $OUT/cuda_tests.log; grep -E "^FAILED|^E  |passed|failed" $OUT/cuda_tests.log | head -20 | cut -c1-300
timeout 200 python3 -m vidloader.bench._combo_run --workloads W4-clips --scale gpu-quick --variants cpu,nvdec,combo --warmup-s 6 --out $OUT/combo_w4.json 2>&1 | grep -v "^Svt" > $OUT/combo_w4.log; grep -E "over" $OUT/combo_w4.log; grep frames_per_s $OUT/combo_w4.log | cut -c1-140
