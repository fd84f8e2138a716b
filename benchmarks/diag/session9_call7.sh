#!/bin/bash
# Session 9, call 7: W1 sequential with frames copied once into their rows against a copy per
# frame plus a stacked copy, and the raw ceiling, in one call (issue 16: 2,111 against 2,840 in
# call 6); the JPEG augmentation's host ops profiled (issue 15). nvImageCodec in .site.
set -u
export LD_LIBRARY_PATH=$PWD/.site/nvidia/cu13/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt
timeout 100 python3 -c "from vidloader.bench import prepare_dataset as p; p('W1', 'gpu-quick', data_dir='/tmp/bench-data')" > /dev/null 2>&1
timeout 330 python3 benchmarks/diag/seq_ab.py 2>&1 | grep -v "^Svt" > $OUT/seq_ab.log; grep -E "^==|\] (vidloader-nvdec|pynvc-threads)" $OUT/seq_ab.log | cut -c1-200
timeout 100 python3 benchmarks/diag/augment_profile.py 2>&1 | grep -v -i "nvjpeg2k\|nvtiff" > $OUT/augment_profile.log; grep -E "^==|Self CPU time total" $OUT/augment_profile.log; sed -n 1,30p $OUT/augment_profile.log | cut -c1-180
