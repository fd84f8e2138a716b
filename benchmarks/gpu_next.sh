#!/bin/bash
# The first device call of the next session (about 9 minutes on one H100 or H200), in
# priority order, from what session 7 could not run:
#   1. every cuda test (the combo's new dealing, the in-place rewrite check, images);
#   2. does NVDEC say when it conceals damage? (issue 17 item 7: benchmarks/diag/nvdec_damage_probe.py);
#   3. the combo on the W4 clips workload, where the CPU is the faster side (issue 13).
# From the repository root on the device, with PyAV and PyNvVideoCodec installed into .site:
#   PYTHONPATH=$PWD/src:$PWD/.site bash benchmarks/gpu_next.sh
# Writes into $OUT: gpu.txt, cuda_tests.log, nvdec_damage.json, combo_w4.json/.log.
set -u
OUT=${OUT:-/tmp/vidloader-gpu-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/gpu.txt"
VIDLOADER_FAIL_WITHOUT_CUDA=1 timeout 200 python3 -m pytest -q -p no:cacheprovider -m cuda tests/ \
  2>&1 | grep -v "^Svt" > "$OUT/cuda_tests.log"
tail -3 "$OUT/cuda_tests.log"
timeout 60 python3 benchmarks/diag/nvdec_damage_probe.py "$OUT/nvdec_damage.json" > /dev/null 2>&1
python3 -c "import json; d = json.load(open('$OUT/nvdec_damage.json')); print({k: (v if not isinstance(v, dict) else {a: b for a, b in v.items() if a != 'mean_diff_per_frame'}) for k, v in d.items()})"
timeout 300 python3 -m vidloader.bench._combo_run --workloads W4-clips --scale gpu-quick \
  --variants cpu,nvdec,combo --out "$OUT/combo_w4.json" 2>&1 | grep -v "^Svt" > "$OUT/combo_w4.log"
grep -E "over|frames_per_s" "$OUT/combo_w4.log" | cut -c1-240
