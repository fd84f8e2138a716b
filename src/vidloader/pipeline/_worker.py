"""CPU decode workers and the unit-filling they share with the in-process pools (separation
mode's demux workers are in ``_demux``: torch-free).

Workers are forks of vidloader's torch-free decode server (``_utils._procs``; of the torch
server when NVTX ranges are on, which are torch's): they write bytes into shared memory
(``_shared_slots``) and never touch CUDA. They never raise: a failure is sent
to the loader as a :class:`~._messages.Failure` with its traceback and the file name
(torchdata.nodes style). Every message is a dataclass of :mod:`._messages`.

One exception is not a unit's failure: :class:`~vidloader.errors.GpuMemoryError`, which only
the in-process pools (NVDEC) can meet. It propagates as it is, so the loader raises it typed
(not wrapped in a ``WorkerError``) and whatever ``on_error`` says.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import traceback

import numpy as np

from ..decoding import get_executor, gpu_memory_error, is_gpu_out_of_memory
from ..errors import GpuMemoryError
from ._assemble import BatchAssembler
from ._messages import (
    STOP,
    CpuWorkerStart,
    Failure,
    FillTask,
    Ready,
    RowsFilled,
)

log = logging.getLogger(__name__)


def _staging_views(slot: dict, start: int, count: int) -> dict:
    """Writable views of a slot's rows ``start:start + count``: numpy on CPU (a worker's
    slots are numpy already), torch on a GPU."""
    views = {name: tensor[start:start + count] for name, tensor in slot.items()}
    if all(isinstance(t, np.ndarray) for t in views.values()):
        return views
    if all(t.device.type == "cpu" for t in views.values()):
        return {name: t.numpy() for name, t in views.items()}
    return views


def worker_main(start: CpuWorkerStart, task_q, result_q, slots) -> None:
    """Loop: take a :class:`FillTask`, fill ``slots`` (the loader's
    :class:`~._shared_slots.SharedSlots`), report; :data:`STOP` stops the worker."""
    # Ctrl-C goes to the whole process group: the loader in the parent handles it and shuts
    # the workers down, so they must not die mid-write with their own traceback.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if start.nice:
        os.nice(start.nice)
    if start.cpus:
        try:
            os.sched_setaffinity(0, start.cpus)
        except OSError as exc:  # a core taken away meanwhile (cgroups): decode anywhere
            log.warning("CPU worker %d could not keep to cores %s (%s); it runs on any core",
                        start.worker_id, list(start.cpus), exc)
    config = start.config
    if config.nvtx:  # its ranges are torch's: loaded (the torch server's, shared) before Ready
        import torch

        torch.set_num_threads(1)
    try:
        executor = get_executor("cpu", **config.executor_options("cpu"))
        assembler = BatchAssembler.for_config(config, executor)
    except BaseException as exc:
        result_q.put(Failure(-1, -1, repr(exc), traceback.format_exc()))
        return
    result_q.put(Ready(start.worker_id))
    try:
        _serve(assembler, slots.arrays(), task_q, result_q)
    finally:
        executor.close()


def _serve(assembler, slots, task_q, result_q) -> None:
    while (task := task_q.get()) is not STOP:
        result_q.put(fill_unit_messages(assembler, slots, task))


def fill_unit_messages(assembler, slots, task: FillTask, bundles=None, failed=()) -> list:
    """Fill a unit of batches (or of row ranges of batches): one :class:`RowsFilled` per
    plan, or one :class:`Failure`. The unit's decode counters ride on its first message."""
    return start_unit_messages(assembler, slots, task, bundles, failed).finish()


#: What a unit allocates on the GPU beyond what the executor names itself (a CPU fallback's
#: frames written into GPU staging slots), for a :class:`GpuMemoryError`.
UNIT_WORK = "a unit of work's frames on their way into the GPU staging slots"


def raise_gpu_memory(exc: BaseException) -> None:
    """Raise ``exc`` typed if the GPU ran out of memory (a :class:`GpuMemoryError` as it is;
    torch's or the binding's out-of-memory error converted): the GPU's failure, not the
    unit's, so never a :class:`Failure` (see the module docstring). Else return."""
    if isinstance(exc, GpuMemoryError):
        raise exc
    if is_gpu_out_of_memory(exc):
        raise gpu_memory_error(exc, UNIT_WORK) from exc


class UnitMessages:
    """A unit started with :func:`start_unit_messages`; :meth:`finish` waits and reports."""

    def __init__(self, assembler, task: FillTask) -> None:
        self.assembler, self.executor, self.task = assembler, assembler.executor, task
        self.fill = None
        self.error: list | None = None

    def fail(self, exc: BaseException) -> list:
        path = getattr(exc, "path", None)
        return [Failure(self.task.first_batch, self.task.slot_ids, repr(exc),
                        traceback.format_exc(), path, unit=self.task.unit)]

    def finish(self) -> list:
        if self.error is not None:
            return self.error
        # Decode counters move only while a unit is waited for (asynchronous executors count
        # in ``wait``), so the difference around it is this unit's, even with others in flight.
        before = dataclasses.asdict(self.executor.stats)
        try:
            results = self.fill.finish()
        except BaseException as exc:
            raise_gpu_memory(exc)
            return self.fail(exc)
        after = dataclasses.asdict(self.executor.stats)
        delta = {k: after[k] - before[k] for k in after}
        zero = dict.fromkeys(delta, 0)
        task, name = self.task, self.executor.name
        fallbacks = self.assembler.take_fallbacks()
        return [
            RowsFilled(p.batch_index, s, r.valid, r.errors, delta if i == 0 else zero, a, name,
                       fallbacks if i == 0 else {}, task.unit)
            for i, (s, p, r, a) in enumerate(zip(task.slot_ids, task.plans, results, task.row_starts))
        ]

    @property
    def ready(self) -> bool:
        """Whether :meth:`finish` returns without waiting for the decoders."""
        return self.error is not None or self.fill is None or self.fill.ready

    def cancel(self) -> None:
        if self.fill is not None:
            self.fill.cancel()


def start_unit_messages(assembler, slots, task: FillTask, bundles=None, failed=(), *,
                        decode_tasks=None) -> UnitMessages:
    """Start filling a unit of batches (see :meth:`BatchAssembler.start_unit` and
    :func:`fill_unit_messages`); ``decode_tasks``: the unit's ``plan_tasks`` if known."""
    unit = UnitMessages(assembler, task)
    try:
        stagings = [_staging_views(slots[s], a, p.batch_size)
                    for s, p, a in zip(task.slot_ids, task.plans, task.row_starts)]
        unit.fill = assembler.start_unit(task.plans, stagings, bundles, failed, tasks=decode_tasks)
    except BaseException as exc:
        raise_gpu_memory(exc)
        unit.error = unit.fail(exc)
    return unit
