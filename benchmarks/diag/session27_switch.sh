#!/bin/bash
# Session 27, call 9 (issue 15; ~270 s; carry .imgwhl). Call 8 (session27-8) found the
# hardware decode at 67-83 images/s beside a pure-Python thread (14,648 alone): the decode
# call retakes the GIL many times a batch and waits each time for the other thread's switch
# interval (5 ms). (1) the probe's rows alone / augment / python at the default interval and at
# 0.5 ms; (2) the one-process loader (2 lanes, readers) at the default interval and 0.5 ms,
# alternated twice; (3) 2 GPU workers (the default) against 3, once each.
set -u
export PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=$PWD/.site/nvidia/cu13/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/gpu.txt"
timeout 100 python3 -c "from vidloader.images._synthetic import write_image_folder as w; w('/tmp/jpeg-ab-x1', num_classes=10, per_class=400)"
for sw in 0.005 0.0005; do
  PROBE_ROUNDS=2 PROBE_ROWS=alone,augment,python PROBE_SWITCH=$sw PROBE_TAG=_switch$sw timeout 60 \
    python3 benchmarks/diag/jpeg_interference_probe.py 4000 30 2>&1 | grep -v -i "nvjpeg2k\|nvtiff" \
    | sed "s/^/switch $sw: /" | tee -a "$OUT/interference_probe.log" | grep -E "images/s|Error"
done
ab() {  # label, then env settings
  local label=$1; shift
  mkdir -p "$OUT/$label"
  env "$@" AB_ONLY="2 lanes, whole images" AB_REFERENCES=0 OUT="$OUT/$label" \
    timeout $(( 265 - SECONDS )) python3 benchmarks/diag/jpeg_loader_ab.py 4000 150 2>&1 \
    | grep -E "images/s|Error" | sed "s/^/$label: /" | tee -a "$OUT/summary.txt"
}
for round in 1 2; do
  [ $SECONDS -lt 230 ] && ab "r$round-switch5ms" AB_SWITCH=0.005
  [ $SECONDS -lt 230 ] && ab "r$round-switch0.5ms" AB_SWITCH=0.0005
done
[ $SECONDS -lt 200 ] && ab "workers2" AB_WORKERS=2
[ $SECONDS -lt 225 ] && ab "workers3" AB_WORKERS=3
rm -rf "$OUT"/r1-* "$OUT"/r2-* "$OUT"/workers*
echo "done at ${SECONDS} s"
