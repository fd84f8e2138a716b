"""A demux worker for tests that also reports what it imported and mapped.

Torch-free on purpose, like the module it wraps: a worker unpickles its target by module
name, so this module is imported in the worker, and an ``import torch`` here would hide the
very thing the test checks.
"""

from __future__ import annotations


def demux_then_report(start, task_q, result_q) -> None:
    """Run the real demux worker until ``STOP``, then report ``(torch modules imported,
    whether libtorch or libcuda is mapped)``."""
    import sys

    from vidloader.pipeline._demux import demux_worker_main

    demux_worker_main(start, task_q, result_q)
    with open("/proc/self/maps") as f:
        maps = f.read()
    torch_modules = sorted(m for m in sys.modules if m == "torch" or m.startswith("torch."))
    result_q.put((torch_modules, "libtorch" in maps, "libcuda" in maps))
