#!/bin/bash
# Next session, first of two back-to-back calls on one warm machine (issue 16, accvlab's
# stream at the full scale): generate W3 full (60 videos x 200 frames of HEVC 1600x900, ~5 min
# on 16 cores: x265 at ~6 frames/s per 2 cores plus 54 ms of painting per frame, measured in
# session 15) into /tmp/bench-data. Then, within the machine's 30 s idle window, run
# session16_w3_stream.sh. Carry .whl.
source "$(dirname "$0")/device_prepare.sh" W3 full 580
du -sh /tmp/bench-data/W3* 2>/dev/null
