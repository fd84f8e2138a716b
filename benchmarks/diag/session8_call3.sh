set -u
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/gpu.txt
timeout 200 python3 benchmarks/diag/nvdec_feed_probe.py $OUT/feed.json 2>&1 | grep -v ^Svt > $OUT/feed.log
cut -c1-330 $OUT/feed.log | head -12
timeout 200 python3 -m vidloader.bench._combo_run --workloads W4-clips --scale gpu-quick --variants cpu,nvdec,combo --out $OUT/combo_w4.json 2>&1 | grep -v "^Svt" > $OUT/combo_w4.log
grep -E "over|frames_per_s" $OUT/combo_w4.log | cut -c1-200
VIDLOADER_FAIL_WITHOUT_CUDA=1 timeout 150 python3 -m pytest -q -p no:cacheprovider -m cuda tests/test_nvdec.py tests/test_loader_nvdec.py tests/test_reliability.py tests/test_combo.py 2>&1 | grep -v "^Svt" > $OUT/cuda_tests.log; tail -3 $OUT/cuda_tests.log
