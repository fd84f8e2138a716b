#!/bin/bash
# Session 27, call 6 (issue 15; carry .imgwhl; DALI unpacked to $HOME/dalisite by calls 3-5 on
# the same warm machine, as in session 26's calls 5-7). (1) `vidloader bench images --workload
# jpeg` on 40,000 files with DALI, the GPU contenders three times in alternating order
# (--rounds 3), with packed places aligned to 4,096 bytes (the default since call 2): the ratio
# to DALI within each round (session 26: 0.60 and 0.52, one round a call). (2) with the time
# left, the one-process loader with places back to back or 4,096-byte aligned, alternated.
set -u
export PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=$PWD/.site/nvidia/cu13/lib:${LD_LIBRARY_PATH:-}
export PYTHONPATH=$PYTHONPATH:$HOME/dalisite
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt
python3 -c "import nvidia.dali as d; print('DALI', d.__version__)" 2>&1 | tail -1 | tee $OUT/dali.txt
timeout $(( 480 - SECONDS )) python3 -m vidloader.bench images --workload jpeg --images 4000 --copies 10 \
  --batches 300 --rounds 3 --data-dir /tmp/bench-images --out $OUT/images 2>&1 \
  | grep -v -i "nvjpeg2k\|nvtiff\|^\[" > $OUT/bench_images.log
tail -24 $OUT/bench_images.log
echo "bench done at ${SECONDS} s"
timeout 100 python3 -c "from vidloader.images._synthetic import write_image_folder as w; w('/tmp/jpeg-ab-x1', num_classes=10, per_class=400)"
ab() {  # label align
  mkdir -p "$OUT/$1"
  AB_ALIGN=$2 AB_ONLY="2 lanes, whole images" AB_REFERENCES=0 OUT="$OUT/$1" \
    timeout $(( 585 - SECONDS )) python3 benchmarks/diag/jpeg_loader_ab.py 4000 150 2>&1 \
    | grep -E "images/s|Error" | sed "s/^/$1: /" | tee -a "$OUT/summary.txt"
}
for round in 1 2; do
  [ $SECONDS -lt 540 ] && ab "r$round-align1" 1
  [ $SECONDS -lt 540 ] && ab "r$round-align4096" 4096
done
rm -rf "$OUT"/r1-* "$OUT"/r2-*
echo "done at ${SECONDS} s"
