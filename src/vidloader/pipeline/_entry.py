"""A worker process's entry point, shared by CPU decode workers and demux workers.

Its own module, torch-free: it is the ``Process`` target that a demux worker unpickles first,
and whatever its module imports, every demux worker imports too (``_utils._procs``: the demux
fork server preloads no torch).
"""

from __future__ import annotations

import traceback

from ._messages import Failure


def bootstrap(target, task_q, result_q) -> None:
    """Run ``target(start, task_q, result_q)``; ``start``, the worker's arguments, comes as the
    first message of its task queue."""
    try:
        start = task_q.get()
    except BaseException as exc:  # e.g. an argument whose class this process cannot import
        result_q.put(Failure(-1, -1, f"cannot read the worker's arguments: {exc!r}",
                             traceback.format_exc()))
        return
    target(start, task_q, result_q)
