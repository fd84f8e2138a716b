#!/bin/bash
# Next session, first of two back-to-back calls on one warm machine (issue 16, accvlab's
# stream at the full scale): generate W3 full (60 videos x 200 frames of HEVC 1600x900, ~5 min
# on 16 cores: x265 at ~6 frames/s per 2 cores plus 54 ms of painting per frame, measured in
# session 15) into /tmp/bench-data. Then, within the machine's 30 s idle window, run
# session16_w3_stream.sh. Carry .whl.
set -u
export PYTHONUNBUFFERED=1
start=$(date +%s)
timeout 580 python3 -c "from vidloader.bench import prepare_dataset as p; p('W3', 'full', data_dir='/tmp/bench-data')" > $OUT/prepare_W3.log 2>&1
echo "prepared rc $? in $(( $(date +%s) - start )) s"
du -sh /tmp/bench-data/W3* 2>/dev/null
