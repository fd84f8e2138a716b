#!/bin/bash
# Session 18, call 9 (~7 min, carry .imgwhl; DALI in $HOME/dalisite, put there by the three
# calls before on the same warm machine: ../shared/tools/dali-parts.sh, copied to .peers/),
# issue 15: `vidloader bench images --workload jpeg` on 40,000 files (4,000 generated JPEGs,
# 500×375 q90, each under 10 names): vidloader's GPU pipeline in worker processes (the new
# default) and in one process, Pillow on all cores, nvImageCodec and torchvision decode alone,
# and DALI's whole pipeline, one after another in one process.
set -u
export PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=$PWD/.site/nvidia/cu13/lib:${LD_LIBRARY_PATH:-}
export PYTHONPATH=$PYTHONPATH:$HOME/dalisite
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt
python3 -c "import nvidia.dali as d; print('dali', d.__version__)"
timeout 520 python3 -m vidloader.bench images --workload jpeg --images 4000 --copies 10 \
  --batches 300 --data-dir /tmp/bench-images --out $OUT/images 2>&1 \
  | grep -v -i "nvjpeg2k\|nvtiff\|^\[" > $OUT/bench_images.log
tail -12 $OUT/bench_images.log
echo "done at ${SECONDS} s"
