#!/bin/bash
# Session 18, call 5 (~6 min, carry .imgwhl), issue 15: call 3 again after its fix (the GPU
# image workers took "cuda" without an index): the image cuda tests, then the loader with 0 to
# 8 worker processes (benchmarks/diag/jpeg_workers_sweep.py).
exec bash "$(dirname "$0")/session18_images_workers.sh"
