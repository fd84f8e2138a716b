#!/bin/bash
# Next session, issue 14 on the GPU machine (~3 min, carry .whl): the first batch is now dealt
# to the workers as whole GOPs (session 16; measured on the 2-core machine only). Start-up of
# the CPU backend and of NVDEC with 16 workers, three loaders per process, CUDA started first,
# with the new cut and the old (FIRST_BATCH_BY_GOP=False), and the CPU decode floor.
source "$(dirname "$0")/device_prepare.sh" W1 gpu-quick
for backend in cpu nvdec; do
  for gop in True False; do
    timeout 100 python3 benchmarks/startup.py --backend $backend --workers 16 --scale gpu-quick \
      --data-dir /tmp/bench-data --cuda-first $([ $backend = cpu ] && [ $gop = True ] && echo --floor) \
      --patch vidloader.pipeline._units.FIRST_BATCH_BY_GOP=$gop \
      --out $OUT/startup_${backend}16_gop$gop.json 2>&1 | grep -E "^loader|floor" | sed "s/^/$backend gop=$gop /" | cut -c1-200
  done
done
