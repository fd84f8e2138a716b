"""W1 sequential on NVDEC with the batch path's two ways of copying frames, and the raw
PyNvVideoCodec ceiling, in one call (issue 16): each wanted frame copied once into its row of
the GOP's stack (``STACK_IN_ROWS``, session 9) against a copy per frame then a stacked copy.

Usage (on the device, W1 prepared under /tmp/bench-data): ``python3 benchmarks/diag/seq_ab.py``;
JSON per run under ``$OUT/ab/<variant>/``.
"""

from __future__ import annotations

import os

from vidloader.bench._cli import main
from vidloader.decoding.nvdec import _executor


def run(out: str, backend: str) -> None:
    main(["run", "--scale", "gpu-quick", "--dataset", "W1", "--data-dir", "/tmp/bench-data",
          "--out", out, "--workers", "16", "--no-plot", "--batches", "160", "--max-seconds", "20",
          "--timeout", "150", "--workload", "sequential", "--backends", backend, "--no-isolate"])


if __name__ == "__main__":
    root = os.path.join(os.environ.get("OUT", "/tmp"), "ab")
    for variant, in_rows in (("rows", True), ("two-copies", False), ("rows-again", True)):
        _executor.STACK_IN_ROWS = in_rows
        print(f"== {variant}", flush=True)
        run(os.path.join(root, variant), "vidloader-nvdec")
    print("== ceiling", flush=True)
    run(os.path.join(root, "ceiling"), "pynvc-threads")
