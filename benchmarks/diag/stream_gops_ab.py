"""W3 multi-camera stream order on NVDEC, units as GOPs of streams against whole batches, in
one call (issue 16, accvlab's workload): ``STREAM_GOP_UNITS`` (session 14) on, off, on again,
then the random order once. Frames/s, decoded per delivered frame and peak GPU memory are in
each run's JSON.

Usage (on the device): ``python3 benchmarks/diag/stream_gops_ab.py [SCALE]`` (default
``gpu``); W3 is generated under /tmp/bench-data if missing; JSON per run under
``$OUT/ab/<variant>/``. ``AB_VARIANTS`` picks and orders the runs (default
``gops,batches,gops-again,random``).
"""

from __future__ import annotations

import os
import sys

import torch

from vidloader.bench._cli import main
from vidloader.pipeline import _loader


def run(out: str, workload: str, scale: str) -> None:
    main(["run", "--scale", scale, "--dataset", "W3", "--data-dir", "/tmp/bench-data",
          "--out", out, "--workers", "16", "--no-plot", "--batches", "400", "--max-seconds", "25",
          "--timeout", "150", "--workload", workload, "--backends", "vidloader-nvdec", "--no-isolate"])
    if torch.cuda.is_initialized():
        torch.cuda.synchronize()
        torch.cuda.empty_cache()  # the next run's peak starts from here
        torch.cuda.reset_peak_memory_stats()


if __name__ == "__main__":
    scale = sys.argv[1] if len(sys.argv) > 1 else "gpu"
    root = os.path.join(os.environ.get("OUT", "/tmp"), "ab")
    variants = os.environ.get("AB_VARIANTS", "gops,batches,gops-again,random").split(",")
    for variant in variants:
        _loader.STREAM_GOP_UNITS = variant != "batches"
        print(f"== {variant}", flush=True)
        workload = "multicam-random" if variant == "random" else "multicam-stream"
        run(os.path.join(root, variant), workload, scale)
