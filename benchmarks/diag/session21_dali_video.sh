#!/bin/bash
# Session 21, call 4 (~9 min, carry .whl and .peers/spdl*; DALI in $HOME/dalisite, put there
# by the three calls before on the same warm machine with ../shared/tools/dali-parts.sh),
# issue 16 item 5: DALI's GPU video reader as a `vidloader bench` backend (`dali`, the plan
# as a file_list, src/vidloader/bench/_peers_dali.py) beside vidloader-nvdec and SPDL, each
# (workload, backend) its own command, in one call:
# (1) the cuda tests of tests/test_bench_dali.py (DALI against the CPU decode);
# (2) W1 gpu-quick (1080p H.264, GOP 30): sequential (dali, spdl, vidloader-nvdec), random
#     (dali, vidloader-nvdec), relaxed (dali, vidloader-nvdec); W4 gpu-quick (340p/720p,
#     GOP 250): clips and clips-head (dali, vidloader-nvdec);
# (3) a summary ($OUT/summary.txt) and the JSONs ($OUT/bench.tgz).
set -u
export PYTHONUNBUFFERED=1
DEADLINE=${DEADLINE:-545}
RES=/tmp/dali-bench; rm -rf "$RES" && mkdir -p "$RES"
source benchmarks/diag/spdl_env.sh
export PYTHONPATH=$PYTHONPATH:$HOME/dalisite
python3 -c "import nvidia.dali as d; print('dali', d.__version__)" 2>&1 | tee -a "$OUT/bench.log"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/gpu.txt"
timeout 200 python3 -c "from vidloader.bench import prepare_dataset as p; p('W1', 'gpu-quick', data_dir='/tmp/bench-data'); p('W4', 'gpu-quick', data_dir='/tmp/bench-data')" > "$OUT/prepare.log" 2>&1 &
P1=$!
VIDLOADER_FAIL_WITHOUT_CUDA=1 timeout 150 python3 -m pytest -q -p no:cacheprovider -m cuda \
  tests/test_bench_dali.py 2>&1 | grep -v "^Svt" > "$OUT/cuda_tests.log"
grep -E "^FAILED|^ERROR|passed|failed" "$OUT/cuda_tests.log" | head -12
wait $P1; echo "prepared W1 and W4 gpu-quick: rc $? at ${SECONDS} s"
bench() {  # dataset workload backend
  local left=$((DEADLINE - SECONDS))
  if [ "$left" -lt 40 ]; then echo "[$2] $3 not run: ${left} s left" | tee -a "$OUT/bench.log"; return; fi
  timeout $(( left < 75 ? left : 75 )) python3 -m vidloader.bench run --scale gpu-quick --dataset $1 \
    --data-dir /tmp/bench-data --out "$RES/$2-$3" --workers 16 --no-plot --batches 300 \
    --max-seconds 8 --timeout 60 --workload $2 --backends $3 2>&1 | grep -v "^Svt" >> "$OUT/bench.log"
  echo "[$2] $3 done at ${SECONDS} s"
}
for b in dali spdl vidloader-nvdec; do bench W1 sequential $b; done
for b in dali vidloader-nvdec; do bench W4 clips $b; done
for b in dali vidloader-nvdec; do bench W4 clips-head $b; done
for b in dali vidloader-nvdec; do bench W1 random $b; done
for b in dali vidloader-nvdec; do bench W1 relaxed $b; done
python3 benchmarks/diag/bench_summary.py "$RES" > "$OUT/summary.txt" 2>&1; cat "$OUT/summary.txt"
tar -czf "$OUT/bench.tgz" -C "$RES" .
echo "done at ${SECONDS} s"
