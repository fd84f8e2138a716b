"""The CPU worker process: decodes batch plans into shared-memory staging slots.

Workers are started with ``spawn`` and never touch CUDA. They never raise: a failure is sent
to the loader with its traceback and the file name (torchdata.nodes style).
"""

from __future__ import annotations

import dataclasses
import signal
import traceback

import numpy as np

from ..decoding import get_executor
from ..processing import Process
from ._assemble import BatchAssembler


@dataclasses.dataclass(frozen=True)
class WorkerConfig:
    """Everything a worker needs, pickled once at start."""

    index: object
    outputs: dict[str, Process]
    backend: str
    executor_options: dict
    on_error: str


def _staging_views(slot: dict, start: int, count: int) -> dict:
    """Writable views of a slot's rows ``start:start + count``: numpy on CPU, torch on a GPU."""
    views = {name: tensor[start:start + count] for name, tensor in slot.items()}
    if all(t.device.type == "cpu" for t in views.values()):
        return {name: t.numpy() for name, t in views.items()}
    return views


def worker_main(worker_id: int, config: WorkerConfig, slots: list, task_q, result_q) -> None:
    """Loop: take ``(slot_ids, plans, row_starts)``, fill the slots, report; ``None`` stops
    the worker."""
    # Ctrl-C goes to the whole process group: the loader in the parent handles it and shuts
    # the workers down, so they must not die mid-write with their own traceback.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    import torch

    torch.set_num_threads(1)
    try:
        executor = get_executor(config.backend, **config.executor_options)
        assembler = BatchAssembler(config.index, config.outputs, executor, on_error=config.on_error)
    except BaseException as exc:
        result_q.put(("error", -1, -1, repr(exc), traceback.format_exc(), None))
        return
    result_q.put(("ready", worker_id))
    try:
        _serve(assembler, executor, slots, task_q, result_q)
    finally:
        executor.close()


def _serve(assembler, executor, slots, task_q, result_q) -> None:
    while True:
        msg = task_q.get()
        if msg is None:
            return
        slot_ids, plans, row_starts = msg
        result_q.put(fill_unit_messages(assembler, executor, slots, slot_ids, plans, row_starts=row_starts))


def fill_unit_messages(
    assembler, executor, slots, slot_ids: list, plans: list, bundles=None, failed=(), *,
    row_starts=None,
) -> list:
    """Fill a unit of batches (or of row ranges of batches); one ``done`` message per plan,
    ``("done", batch_index, slot_id, valid, errors, stats, row_start)``, or one ``error``
    message. ``plans[i]`` fills rows ``row_starts[i]:`` of slot ``slot_ids[i]`` (default 0).

    The unit's decode counters ride on its first message.
    """
    return start_unit_messages(
        assembler, executor, slots, slot_ids, plans, bundles, failed, row_starts=row_starts
    ).finish()


class UnitMessages:
    """A unit started with :func:`start_unit_messages`; :meth:`finish` waits and reports."""

    def __init__(self, executor, slot_ids: list, plans: list, row_starts: list) -> None:
        self.executor, self.slot_ids, self.plans = executor, slot_ids, plans
        self.row_starts = row_starts
        self.fill = None
        self.error: list | None = None

    def fail(self, exc: BaseException) -> list:
        path = getattr(exc, "path", None)
        first = self.plans[0].batch_index
        return [("error", first, self.slot_ids, repr(exc), traceback.format_exc(), path)]

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
        return [
            ("done", p.batch_index, s, r.valid, r.errors, delta if i == 0 else zero, a)
            for i, (s, p, r, a) in enumerate(zip(self.slot_ids, self.plans, results, self.row_starts))
        ]

    def cancel(self) -> None:
        if self.fill is not None:
            self.fill.cancel()


def start_unit_messages(
    assembler, executor, slots, slot_ids: list, plans: list, bundles=None, failed=(), *,
    tasks=None, row_starts=None,
) -> UnitMessages:
    """Start filling a unit of batches (see :meth:`BatchAssembler.start_unit` and
    :func:`fill_unit_messages`)."""
    row_starts = [0] * len(plans) if row_starts is None else list(row_starts)
    unit = UnitMessages(executor, slot_ids, plans, row_starts)
    try:
        stagings = [
            _staging_views(slots[s], a, p.batch_size) for s, p, a in zip(slot_ids, plans, row_starts)
        ]
        unit.fill = assembler.start_unit(plans, stagings, bundles, failed, tasks=tasks)
    except BaseException as exc:
        unit.error = unit.fail(exc)
    return unit


def demux_worker_main(worker_id: int, index, on_error: str, task_q, result_q) -> None:
    """Separation mode: demux the GOPs a unit of batches needs into Annex-B packet bundles.

    CPU only by construction: it imports neither torch.cuda nor PyNvVideoCodec, so it is
    safe under fork as well as spawn (the exercise's CUDA_ERROR_NOT_INITIALIZED cannot
    happen here). Takes ``(key, plans, part, start, stop)``: demux tasks ``start:stop`` of
    the unit's ``plan_tasks``. Replies ``("bundles", key, bundles, failed, part, shared)``
    (payloads in one shared-memory tensor, see :func:`pack_payloads`) or ``("error", …)``.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from ..decoding.nvdec._annexb import ContainerCache
    from ..planning import plan_tasks

    containers = ContainerCache()
    result_q.put(("ready", worker_id))
    try:
        while (msg := task_q.get()) is not None:
            key, plans, part, start, stop = msg
            try:
                # Every part re-plans the unit (cheap) and demuxes its own slice of the tasks.
                tasks = plan_tasks(plans, index)[start:stop]
                bundles, failed = _demux_tasks(tasks, containers, on_error)
            except BaseException as exc:
                tb = traceback.format_exc()
                result_q.put(("error", key, None, repr(exc), tb, getattr(exc, "path", None)))
                continue
            shared, light = pack_payloads(bundles)
            result_q.put(("bundles", key, light, failed, part, shared))
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


def _demux_tasks(tasks, containers, on_error: str):
    from ..decoding.nvdec._annexb import demux_gops
    from ..errors import MediaError

    bundles, failed = [], []
    for task in tasks:
        try:
            bundles.append(demux_gops(task.record, task.gops, container_cache=containers))
        except MediaError as exc:
            if on_error == "raise":
                raise
            bundles.append(None)
            failed.append((task.video_index, exc.path, str(exc)))
    return bundles, failed
