"""Worker processes (CPU decode, separation-mode demux) and the unit-filling they share with
the in-process pools.

Workers are forks of vidloader's fork server (``_utils._procs``) and never touch CUDA. They never raise: a failure is sent
to the loader as a :class:`~._messages.Failure` with its traceback and the file name
(torchdata.nodes style). Every message is a dataclass of :mod:`._messages`.
"""

from __future__ import annotations

import dataclasses
import signal
import traceback

import numpy as np

from .._utils._nvtx import NO_RANGES
from ..decoding import get_executor
from ._assemble import BatchAssembler
from ._messages import (
    STOP,
    CpuWorkerStart,
    DemuxWorkerStart,
    Failure,
    FillTask,
    PacketsDemuxed,
    Ready,
    RowsFilled,
)


def _staging_views(slot: dict, start: int, count: int) -> dict:
    """Writable views of a slot's rows ``start:start + count``: numpy on CPU, torch on a GPU."""
    views = {name: tensor[start:start + count] for name, tensor in slot.items()}
    if all(t.device.type == "cpu" for t in views.values()):
        return {name: t.numpy() for name, t in views.items()}
    return views


def worker_main(start: CpuWorkerStart, task_q, result_q) -> None:
    """Loop: take a :class:`FillTask`, fill the slots, report; :data:`STOP` stops the worker."""
    # Ctrl-C goes to the whole process group: the loader in the parent handles it and shuts
    # the workers down, so they must not die mid-write with their own traceback.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    import torch

    torch.set_num_threads(1)
    config = start.config
    try:
        executor = get_executor("cpu", **config.executor_options("cpu"))
        assembler = BatchAssembler.for_config(config, executor)
    except BaseException as exc:
        result_q.put(Failure(-1, -1, repr(exc), traceback.format_exc()))
        return
    result_q.put(Ready(start.worker_id))
    try:
        _serve(assembler, start.slots, task_q, result_q)
    finally:
        executor.close()


def _serve(assembler, slots, task_q, result_q) -> None:
    while (task := task_q.get()) is not STOP:
        result_q.put(fill_unit_messages(assembler, slots, task))


def fill_unit_messages(assembler, slots, task: FillTask, bundles=None, failed=()) -> list:
    """Fill a unit of batches (or of row ranges of batches): one :class:`RowsFilled` per
    plan, or one :class:`Failure`. The unit's decode counters ride on its first message."""
    return start_unit_messages(assembler, slots, task, bundles, failed).finish()


class UnitMessages:
    """A unit started with :func:`start_unit_messages`; :meth:`finish` waits and reports."""

    def __init__(self, assembler, task: FillTask) -> None:
        self.assembler, self.executor, self.task = assembler, assembler.executor, task
        self.fill = None
        self.error: list | None = None

    def fail(self, exc: BaseException) -> list:
        path = getattr(exc, "path", None)
        return [Failure(self.task.first_batch, self.task.slot_ids, repr(exc),
                        traceback.format_exc(), path)]

    def finish(self) -> list:
        if self.error is not None:
            return self.error
        # Decode counters move only while a unit is waited for (asynchronous executors count
        # in ``wait``), so the difference around it is this unit's, even with others in flight.
        before = dataclasses.asdict(self.executor.stats)
        try:
            results = self.fill.finish()
        except BaseException as exc:
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
        unit.error = unit.fail(exc)
    return unit


def demux_worker_main(start: DemuxWorkerStart, task_q, result_q) -> None:
    """Separation mode: demux the GOPs a unit of batches needs into Annex-B packet bundles.

    CPU only by construction: it imports neither torch.cuda nor PyNvVideoCodec, so it is
    safe under fork as well as spawn (the exercise's CUDA_ERROR_NOT_INITIALIZED cannot
    happen here). Takes :class:`DemuxTask` s; replies :class:`PacketsDemuxed` (payloads in
    one shared-memory tensor, see :func:`pack_payloads`) or a :class:`Failure` naming the
    unit's key.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from ..decoding.nvdec import ContainerCache
    from ..planning import plan_tasks

    config = start.config
    containers = ContainerCache()
    result_q.put(Ready(start.worker_id))
    try:
        while (task := task_q.get()) is not STOP:
            try:
                # Every part re-plans the unit (cheap) and demuxes its own slice of the tasks.
                tasks = plan_tasks(task.plans, config.index)[task.start:task.stop]
                bundles, failed = _demux_tasks(tasks, containers, config.skips_bad_files,
                                               config.cpu_only, config.ranges)
            except BaseException as exc:
                result_q.put(Failure(-1, None, repr(exc), traceback.format_exc(),
                                     getattr(exc, "path", None), unit_key=task.key))
                continue
            shared, light = pack_payloads(bundles)
            result_q.put(PacketsDemuxed(task.key, light, failed, task.part, shared))
    finally:
        containers.close()


_NO_PAYLOAD = np.empty(0, np.uint8)


def pack_payloads(bundles: list) -> tuple:
    """Every bundle's payload in one shared-memory ``uint8`` tensor, and the bundles without
    their payloads, each with its ``(start, stop)`` in that tensor (``None`` stays ``None``).

    A torch tensor in shared memory crosses the queue as a file descriptor: the GPU process
    maps it instead of reading and unpickling the bytes on its main thread. Measured on the
    2-core machine for 122 MB (one demux part of a GopShuffle block): 1,204 ms of main-thread
    ``get`` as pickled numpy, 34 ms as one shared tensor.
    """
    import torch

    sizes = [0 if b is None else int(b.payload.nbytes) for b in bundles]
    shared = torch.empty(sum(sizes), dtype=torch.uint8).share_memory_()
    flat, pos, light = shared.numpy(), 0, []
    for bundle, n in zip(bundles, sizes):
        if bundle is None:
            light.append(None)
            continue
        flat[pos:pos + n] = bundle.payload
        light.append((dataclasses.replace(bundle, payload=_NO_PAYLOAD), pos, pos + n))
        pos += n
    return shared, light


def unpack_payloads(light: list, shared) -> list:
    """The bundles of :func:`pack_payloads`, their payloads views of the shared tensor (which
    stays mapped while any view lives)."""
    flat = shared.numpy()
    return [None if item is None else dataclasses.replace(item[0], payload=flat[item[1]:item[2]])
            for item in light]


def _demux_tasks(tasks, containers, skips_bad_files: bool, cpu_only=None, ranges=NO_RANGES):
    """Bundles of the tasks, ``None`` for a task routed to the CPU (NVDEC cannot decode its
    file: the loader's process decodes it there) or whose demux failed (listed in ``failed``)."""
    from ..decoding.nvdec import demux_gops
    from ..errors import MediaError

    bundles, failed = [], []
    for task in tasks:
        if cpu_only is not None and cpu_only[task.video_index]:
            bundles.append(None)
            continue
        try:
            with ranges("vidloader.demux", task.record.path):
                bundles.append(demux_gops(task.record, task.gops, container_cache=containers))
        except MediaError as exc:
            if not skips_bad_files:
                raise
            bundles.append(None)
            failed.append((task.video_index, exc.path, str(exc)))
    return bundles, failed
