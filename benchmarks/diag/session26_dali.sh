#!/bin/bash
# Session 26, call 8 (issue 15; carry .imgwhl; DALI unpacked to $HOME/dalisite by calls 5-7 on
# the same warm machine): `vidloader bench images --workload jpeg` on 40,000 files (4,000
# generated 500x375 JPEGs under 10 names) with the session 26 defaults (2 reader processes in
# one process, read-ahead in the 2 GPU workers) and DALI's whole pipeline in the same call,
# as session 21's call 5 ran it (ratio 0.48 then).
set -u
export PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=$PWD/.site/nvidia/cu13/lib:${LD_LIBRARY_PATH:-}
export PYTHONPATH=$PYTHONPATH:$HOME/dalisite
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt
python3 -c "import nvidia.dali as d; print('DALI', d.__version__)" 2>&1 | tail -1 | tee $OUT/dali.txt
timeout $(( 560 - SECONDS )) python3 -m vidloader.bench images --workload jpeg --images 4000 --copies 10 \
  --batches 300 --data-dir /tmp/bench-images --out $OUT/images 2>&1 \
  | grep -v -i "nvjpeg2k\|nvtiff\|^\[" > $OUT/bench_images.log
tail -14 $OUT/bench_images.log
echo "done at ${SECONDS} s"
