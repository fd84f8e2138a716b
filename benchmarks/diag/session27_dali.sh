#!/bin/bash
# WRITTEN IN SESSION 26, NOT YET RUN. Issue 15 (carry .imgwhl; DALI unpacked to $HOME/dalisite
# by three calls just before, on the same warm machine: see benchmarks/results/gpu/session26-1/
# NOTE.md, calls 5-7). `vidloader bench images --workload jpeg` on 40,000 files with DALI, the
# GPU contenders three times in alternating order (--rounds 3): the ratio to DALI within each
# round, where session 26 had one round a call (0.60 and 0.52, session26-8 and -9). ~350 s.
set -u
export PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=$PWD/.site/nvidia/cu13/lib:${LD_LIBRARY_PATH:-}
export PYTHONPATH=$PYTHONPATH:$HOME/dalisite
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt
python3 -c "import nvidia.dali as d; print('DALI', d.__version__)" 2>&1 | tail -1 | tee $OUT/dali.txt
timeout $(( 570 - SECONDS )) python3 -m vidloader.bench images --workload jpeg --images 4000 --copies 10 \
  --batches 300 --rounds 3 --data-dir /tmp/bench-images --out $OUT/images 2>&1 \
  | grep -v -i "nvjpeg2k\|nvtiff\|^\[" > $OUT/bench_images.log
tail -22 $OUT/bench_images.log
echo "done at ${SECONDS} s"
