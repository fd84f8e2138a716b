#!/bin/bash
# Session 20 (~6 min, carry .imgwhl and .variants: patched copies of src/vidloader made by
# benchmarks/diag/session20_make_variants.py), issue 15: can the in-process pool
# (num_workers=0, one CUDA context) be lifted by changing its decoder? Variants: "bytes" (the
# pools read the files and decode bytes), "bytes-lean" (and nvImageCodec's default decoder
# and parameters, sRGB kept, no EXIF orientation), "tv" (torchvision's batched nvJPEG decode).
# First each variant's decoder against src's on 64 generated JPEGs plus edge cases, and its
# decode alone; then the GPU JPEG loader with 0 and 2 workers per variant, src first and last.
set -u
export PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=$PWD/.site/nvidia/cu13/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt
python3 -c "import torch, torchvision, nvidia.nvimgcodec as n; print('torch', torch.__version__, 'torchvision', torchvision.__version__, 'nvimgcodec', getattr(n, '__version__', '?'))" \
  2>&1 | tail -1 | tee $OUT/versions.txt
CHECK=/tmp/s20-check
DUMPS=/tmp/s20-dumps
mkdir -p $DUMPS
DIAG=benchmarks/diag
timeout 120 python3 $DIAG/session20_decode_check.py make $CHECK 8000 2>&1 | tail -3 | tee $OUT/decode_check.log
for v in src:src bytes:.variants/bytes bytes-lean:.variants/bytes-lean tv:.variants/tv; do
  name=${v%%:*}; dir=${v#*:}
  echo "== $name" >> $OUT/decode_check.log
  PYTHONPATH=$PWD/$dir:$PWD/.site timeout 75 python3 $DIAG/session20_decode_check.py dump $CHECK $DUMPS/check_$name.pt 2>&1 \
    | grep -v -i "nvjpeg2k\|nvtiff\|^\[" | tail -8 >> $OUT/decode_check.log
done
echo "== compare (src: the reference)" >> $OUT/decode_check.log
timeout 60 python3 $DIAG/session20_decode_check.py compare $CHECK $DUMPS/check_src.pt \
  $DUMPS/check_bytes.pt $DUMPS/check_bytes-lean.pt $DUMPS/check_tv.pt 2>&1 | tail -40 >> $OUT/decode_check.log
cut -c1-300 $OUT/decode_check.log
echo "checks done at ${SECONDS} s"
timeout $((470 - SECONDS)) python3 $DIAG/jpeg_budget_probe.py 8000 6 --no-stages --no-mps \
  --loaders "src:src:0,2;bytes:.variants/bytes:0,2;bytes-lean:.variants/bytes-lean:0,2;tv:.variants/tv:0,2;src:src:0,2" 2>&1 \
  | grep -v -i "nvjpeg2k\|nvtiff\|^\[" > $OUT/jpeg_budget_probe.log
cut -c1-420 $OUT/jpeg_budget_probe.log
echo "done at ${SECONDS} s"
