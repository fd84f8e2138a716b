# Session 8, call 4: the combo on W4 clips and W1 random frames after chunked NVDEC feeding and
# the combo's wait on both executors; then W1 sequential against the raw NVDEC ceiling.
set -u
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/gpu.txt
timeout 170 python3 -m vidloader.bench._combo_run --workloads W4-clips --scale gpu-quick --variants cpu,nvdec,combo --out $OUT/combo_w4.json 2>&1 | grep -v "^Svt" > $OUT/combo_w4.log
grep -E "over|frames_per_s" $OUT/combo_w4.log | cut -c1-160
timeout 230 python3 -m vidloader.bench._combo_run --workloads W1-random --scale gpu-quick --variants cpu,nvdec,combo --out $OUT/combo_w1.json 2>&1 | grep -v "^Svt" > $OUT/combo_w1.log
grep -E "over|frames_per_s" $OUT/combo_w1.log | cut -c1-160
BENCH_STEPS=sequential timeout 170 bash benchmarks/gpu_run.sh > $OUT/seq.log 2>&1
grep -E "frames/s|vidloader-nvdec|pynvc" $OUT/seq.log | tail -8 | cut -c1-200
