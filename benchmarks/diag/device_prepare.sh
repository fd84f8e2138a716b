#!/bin/bash
# Shared first step of the device call scripts (sourced): the GPU's name into $OUT/gpu.txt
# and dataset $1 at scale $2 generated under /tmp/bench-data (log $OUT/prepare_$1.log), in at
# most $3 seconds (default 150). Earlier sessions' scripts repeat these lines: they are the
# records of what ran, so they stay as they ran.
set -u
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt
_prep_start=$(date +%s)
timeout "${3:-150}" python3 -c "from vidloader.bench import prepare_dataset as p; p('$1', '$2', data_dir='/tmp/bench-data')" > $OUT/prepare_$1.log 2>&1
echo "prepared $1 $2: rc $? in $(( $(date +%s) - _prep_start )) s"
