"""A worker process's entry point, shared by CPU decode workers and demux workers.

Its own module, torch-free: it is the ``Process`` target that a demux worker unpickles first,
and whatever its module imports, every demux worker imports too (``_utils._procs``: the demux
fork server preloads no torch).
"""

from __future__ import annotations

import multiprocessing
import traceback
from multiprocessing.connection import wait

from ._messages import STOP, Failure


class ParentWatchingQueue:
    """A worker's task queue whose :meth:`get` also returns :data:`STOP` once the loader's
    process is gone.

    A worker blocked on its task queue never sees that queue close when the loader's process
    dies without shutting it down (SIGKILL, the OOM killer, ``os._exit``): every process that
    received a ``multiprocessing.Queue`` holds both of its ends, the worker included. Found on
    the CPU machine: after the loader's process exited, its demux workers sat in a pipe read
    for good, each still holding its memory. The parent's sentinel (the pipe
    ``multiprocessing`` keeps from the loader's process to each child it started, through the
    fork server too) becomes readable when that process is gone, so the worker waits on both.
    """

    def __init__(self, task_q, parent_sentinel: int | None, result_q=None) -> None:
        self._q, self._sentinel, self._result_q = task_q, parent_sentinel, result_q
        self.orphaned = False

    def ready(self) -> bool:
        """Whether a task (or :data:`STOP`) is waiting, without blocking."""
        return self._q._reader.poll(0)

    def get(self):
        """The next task, or :data:`STOP` if the loader's process has gone."""
        if self._sentinel is None:
            return self._q.get()
        reader = self._q._reader  # the queue's receiving Connection (what Queue.get reads)
        while True:
            ready = wait([reader, self._sentinel])
            if reader in ready:
                return self._q.get()
            if self._sentinel in ready:
                self.orphaned = True
                if self._result_q is not None:
                    # Nobody reads the results any more: exit without flushing them (the
                    # queue's feeder would wait for a reader forever).
                    self._result_q.cancel_join_thread()
                return STOP


def _parent_sentinel() -> int | None:
    parent = multiprocessing.parent_process()
    return None if parent is None else parent.sentinel


def bootstrap(target, task_q, result_q, inherited=None) -> None:
    """Run ``target(start, task_q, result_q)``; ``start``, the worker's arguments, comes as the
    first message of its task queue. The worker reads its tasks through a
    :class:`ParentWatchingQueue`: if the loader's process dies, the worker stops.

    ``inherited``, when given, came with the fork request itself (a ``Process`` argument: file
    descriptors travel with it, see ``_shared_slots``) and is passed on as a fourth argument."""
    tasks = ParentWatchingQueue(task_q, _parent_sentinel(), result_q)
    try:
        start = tasks.get()
    except BaseException as exc:  # e.g. an argument whose class this process cannot import
        result_q.put(Failure(-1, -1, f"cannot read the worker's arguments: {exc!r}",
                             traceback.format_exc()))
        return
    if start is STOP:  # the loader's process died before the worker started
        return
    if inherited is None:
        target(start, tasks, result_q)
    else:
        target(start, tasks, result_q, inherited)
