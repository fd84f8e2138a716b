#!/bin/bash
# Session 12, call 2: (1) the cuda tests of the NVDEC paths (decoder warm-up, per-worker
# result queues) while W1 generates; (2) NVDEC start-up, 16 workers, 3 loaders each: decoder
# sessions started while the workers start (new) against VIDLOADER_NVDEC_WARM_UP=0 (as
# before), and with CUDA started before the first loader (issue 14); (3) the combo on W1
# uniform random frames with and without the horizon rule (issue 13).
set -u
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt
timeout 200 python3 -c "from vidloader.bench import prepare_dataset as p; p('W1', 'gpu-quick', data_dir='/tmp/bench-data')" > $OUT/prepare_W1.log 2>&1 &
P1=$!
VIDLOADER_FAIL_WITHOUT_CUDA=1 timeout 200 python3 -m pytest -q -p no:cacheprovider -m cuda \
  tests/test_nvdec_concealed.py tests/test_loader_nvdec.py tests/test_combo.py tests/test_nvdec_logic.py tests/test_nvdec.py \
  2>&1 | grep -v "^Svt" > $OUT/cuda_tests.log
grep -E "^FAILED|^ERROR|passed|failed" $OUT/cuda_tests.log | head
wait $P1; echo "prepared W1 rc $?"
st() { timeout 60 python3 benchmarks/startup.py --backend nvdec --workers 16 --scale gpu-quick --loaders 3 \
    --data-dir /tmp/bench-data --hang-dump 55 "${@:2}" --out $OUT/startup_$1.json > $OUT/startup_$1.log 2>&1
  echo "== $1"; grep -E "^loader|^CUDA" $OUT/startup_$1.log; }
st warm
VIDLOADER_NVDEC_WARM_UP=0 st nowarm
st warm_cudafirst --cuda-first
VIDLOADER_NVDEC_WARM_UP=0 st nowarm_cudafirst --cuda-first
timeout 200 python3 -m vidloader.bench._combo_run --workloads W1-random --scale gpu-quick \
  --variants cpu,nvdec,combo,combo-horizon0 --warmup-s 5 --window-s 6 --windows 3 \
  --out $OUT/combo_w1.json 2>&1 | grep -v "^Svt" > $OUT/combo_w1.log
grep -E "over" $OUT/combo_w1.log
python3 - $OUT/combo_w1.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))["results"]["W1-random"]
for k, v in d.items():
    print(f"{k:16s} {v['frames_per_s']:7.0f} min {v['frames_per_s_min']:7.0f} share {v['share_by_executor_timed']} "
          f"gaps {v['batch_gap_ms']} idle {v['combo_cpu_idle_s']} cpu {v.get('cpu_util_pct', 0):.0f}% nvdec {v.get('nvdec_util_pct', 0):.0f}%")
PY
