#!/bin/bash
# Session 13: the first NVDEC loader of a process waits ~0.8 s more in its first GOPs than
# later ones, with 4, 8 or 16 decoders alike (session13-9). Paid once per process (one NVDEC
# frame decoded before the loaders), or by the status tap (VIDLOADER_NVDEC_STATUS_TAP=0)?
# W1 gpu-quick, 16 workers, 3 loaders per process, with timelines.
set -u
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt
timeout 200 python3 -c "from vidloader.bench import prepare_dataset as p; p('W1', 'gpu-quick', data_dir='/tmp/bench-data')" > $OUT/prepare_W1.log 2>&1
echo "prepared W1 rc $?"
run() {  # tag, then extra arguments / environment
  local tag=$1; shift
  env "$@" timeout 80 python3 benchmarks/startup.py --backend nvdec --workers 16 --scale gpu-quick \
    --loaders 3 --data-dir /tmp/bench-data --hang-dump 75 --timeline $EXTRA --out $OUT/startup_$tag.json \
    > $OUT/startup_$tag.log 2>&1
  echo "== $tag"; grep -E "^loader|^one NVDEC" $OUT/startup_$tag.log | cut -c1-130
}
EXTRA="" run plain
EXTRA="--prime-nvdec" run primed
EXTRA="" run tap_off VIDLOADER_NVDEC_STATUS_TAP=0
EXTRA="--cuda-first" run cudafirst
