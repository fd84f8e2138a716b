#!/bin/bash
# Session 16, call 1 (issue 13): what can two independent loaders get from this machine at
# once? W4 clips at the gpu scale, 16 workers: CPU alone, NVDEC alone, the two at once in two
# processes with their windows at the same moments (cpu+nvdec; and cpu@10+nvdec, the CPU side
# niced 10 as the combo's CPU workers are), and the combo without the horizon rule (the best
# of sessions 11-15, 0.78-0.80 of cpu + nvdec). over_pair = combo / (both at once): the
# combo's own loss, apart from the machine's. Also the CPU topology (are the 16 cores 8 with
# two threads each?). 8 s warm-up, three 10 s windows. ~6 min, carry .whl.
source "$(dirname "$0")/device_prepare.sh" W4 gpu
lscpu > $OUT/lscpu.txt 2>&1
cat /sys/devices/system/cpu/cpu*/topology/thread_siblings_list 2>/dev/null | sort -u | tr '\n' ' ' > $OUT/siblings.txt
echo "siblings: $(cat $OUT/siblings.txt)"; grep -E "^(Model name|Thread|Core|Socket|CPU\(s\))" $OUT/lscpu.txt
timeout 480 python3 -m vidloader.bench._combo_run --workloads W4-clips --scale gpu \
  --variants cpu,nvdec,cpu+nvdec,cpu@10+nvdec,combo-horizon0 \
  --warmup-s 8 --window-s 10 --windows 3 \
  --out $OUT/combo_pair_w4.json 2>&1 | grep -v "^Svt" > $OUT/combo_pair_w4.log
grep -E "summary|/ \(" $OUT/combo_pair_w4.log
