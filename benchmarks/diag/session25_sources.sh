#!/bin/bash
# Session 25, issue 15, one call (~180 s, carry .imgwhl): (1) nvImageCodec's packed decode
# given paths, bytes read beforehand, or bytes read in Python, on 1 and 2 threads; (2) the
# in-process pool's lanes given paths (as shipped) or bytes from its reader threads, both
# packed, alternated twice.
set -u
export PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=$PWD/.site/nvidia/cu13/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/gpu.txt"
timeout 150 python3 benchmarks/diag/jpeg_sources_probe.py 4000 30 2>&1 \
  | grep -v -i "nvjpeg2k\|nvtiff" | tee "$OUT/sources.log"
ab() {  # label bytes(1/0)
  mkdir -p "$OUT/$1"
  AB_BYTES=$2 AB_ONLY="2 lanes, whole images" AB_REFERENCES=0 OUT="$OUT/$1" \
    timeout 80 python3 benchmarks/diag/jpeg_loader_ab.py 4000 150 2>&1 \
    | grep -E "images/s|Error" | sed "s/^/$1: /" | tee -a "$OUT/summary.txt"
}
for round in 1 2; do
  ab "r$round-paths" 0
  ab "r$round-bytes" 1
done
echo "done at ${SECONDS} s"
