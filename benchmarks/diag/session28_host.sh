#!/bin/bash
# WRITTEN IN SESSION 27, NOT YET RUN. Issue 15 (carry .imgwhl; DALI unpacked to $HOME/dalisite
# by three calls just before on the same warm machine, as session 27's calls 3-5 did; ~450 s).
# Session 27 found nvImageCodec's decode retaking the GIL about 2.6 times an image: beside a
# pure-Python thread it fell from 14,648 to 67-83 images/s (5 ms switch interval) and 773-809
# (0.5 ms) (session27-8, -9). A training loop's host side is such a thread. The JPEG bench with
# DALI, the consumer idle and then working 10 ms on the host after each batch of 256 (a bound
# of 25,600 images/s): does the default loader (2 GPU worker processes) keep its pace, and how
# far does the one-process pool fall? Two rounds each.
set -u
export PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=$PWD/.site/nvidia/cu13/lib:${LD_LIBRARY_PATH:-}
export PYTHONPATH=$PYTHONPATH:$HOME/dalisite
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt
python3 -c "import nvidia.dali as d; print('DALI', d.__version__)" 2>&1 | tail -1 | tee $OUT/dali.txt
for ms in 10 0; do
  timeout $(( 560 - SECONDS )) python3 -m vidloader.bench images --workload jpeg --images 4000 --copies 10 \
    --batches 200 --rounds 2 --host-ms $ms --data-dir /tmp/bench-images --out $OUT/host$ms 2>&1 \
    | grep -v -i "nvjpeg2k\|nvtiff\|^\[" > $OUT/bench_images_host$ms.log
  tail -14 $OUT/bench_images_host$ms.log
  echo "host $ms ms done at ${SECONDS} s"
done
