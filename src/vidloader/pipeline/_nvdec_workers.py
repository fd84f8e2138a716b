"""NVDEC in worker processes (``nvdec_processes=K``): each worker demuxes and decodes its units
on the GPU with an NVDEC executor of its own, into staging slots it shares with the loader's
process through CUDA IPC.

Why processes: in one process the NVDEC decoder threads spend their time in Python under one
GIL (copying frames out of NVDEC's surfaces, converting stacks, writing windows): on SPDL's
Kinetics setting NVDEC was 13-19% busy and 2 of 16 cores used (session 17). Processes have a
GIL each: on the H200 four whole NVDEC loaders in four processes delivered 5,840 frames/s
together against 2,523 for one (``benchmarks/results/gpu/session18-2``). The price is a CUDA
context, torch and NVDEC decoders per process: GPU and host memory grow with ``K``.

The hand-over follows the GPU image workers' (:mod:`._image_gpu_workers`): the loader's process
allocates the slots and their fences (:class:`~._slot_fences.SlotFences`); ``submit`` records
the fences of the task's slots on the consumer's stream and sends the task; the worker waits
for them (on the host), fills the unit with the same code as the loader's
own NVDEC pools (:func:`~._worker.start_unit_messages`: the executor's decoder threads, GOP
sink, CPU fallback), waits for its GPU work, and replies, so a slot is complete when its
message arrives. Each worker keeps :func:`units_per_process` units in flight (2, or 1 with
``units_decoding=1``), so its decoders do not drain between units.

A worker demuxes with its own decoder threads (the executor's inline path): it has no demux
workers, as daemonic processes cannot start processes of their own.
"""

from __future__ import annotations

import collections
import dataclasses
import signal
import traceback

import torch

from ..errors import GpuMemoryError
from ._messages import STOP, Failure, FillTask, Ready
from ._pool import _allocate
from ._slot_fences import FencedWorkerPool, SlotFences
from ._worker import start_unit_messages

#: Units a worker decodes at once: the next unit's GOPs are queued on its decoder threads
#: while the oldest is waited for and replied to.
UNITS_PER_PROCESS = 2


def units_per_process(units_decoding: int) -> int:
    """Units each worker decodes at once: :data:`UNITS_PER_PROCESS`, or fewer where
    ``units_decoding`` (``nvdec_options``, or what ``memory_budget`` lowered it to) is lower;
    each unit in flight holds staging slots."""
    return max(1, min(UNITS_PER_PROCESS, int(units_decoding)))


@dataclasses.dataclass(frozen=True)
class NvdecWorkerStart:
    """An NVDEC worker's arguments: the loader's config, the shared GPU slots, and per slot
    the inter-process event recorded once the slot's last batch was copied out."""

    worker_id: int
    config: object  # LoaderConfig
    slots: list
    copied_out: list


def nvdec_worker_main(start: NvdecWorkerStart, task_q, result_q) -> None:
    """Take :class:`FillTask` s, fill them on NVDEC (up to :func:`units_per_process` at once),
    reply one list of :class:`~._messages.RowsFilled` per task in the order taken (or a
    :class:`Failure`)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the loader's to handle
    config = start.config
    try:
        from ..decoding import get_executor
        from ._backends import nvdec_assembler

        torch.cuda.set_device(config.gpu)
        assembler = nvdec_assembler(config, get_executor("nvdec", **config.executor_options("nvdec")))
    except BaseException as exc:  # e.g. PyNvVideoCodec missing: the loader raises it
        result_q.put(Failure(-1, -1, f"an NVDEC worker could not start its decoders: {exc!r}",
                             traceback.format_exc()))
        return
    result_q.put(Ready(start.worker_id))
    try:
        serve_units(task_q, result_q.put, at_once=units_per_process(config.units_decoding),
                    start_unit=lambda task: _start(start, assembler, task),
                    finish_unit=lambda task, unit: _finish(task, unit, config.gpu))
    finally:
        assembler.close()


def serve_units(task_q, reply, *, at_once: int, start_unit, finish_unit) -> None:
    """A worker's loop: start up to ``at_once`` tasks' units (``start_unit(task)`` →
    ``(task, unit)``), taking another only while one is in flight if a task is already
    waiting (``task_q.ready()``), and ``reply`` each ``finish_unit(task, unit)`` in the order
    taken, until :data:`~._messages.STOP`; units still in flight then are cancelled."""
    in_flight: collections.deque = collections.deque()
    try:
        while True:
            if len(in_flight) < at_once and (not in_flight or task_q.ready()):
                task = task_q.get()
                if task is STOP:
                    break
                in_flight.append(start_unit(task))
                continue
            reply(finish_unit(*in_flight.popleft()))
    finally:
        for _, unit in in_flight:
            unit.cancel()


def _start(start: NvdecWorkerStart, assembler, task: FillTask):
    """``(task, unit)``: the task's unit started once its slots are free, or ``(task, None)``
    with the failure kept on the task's side (see :func:`_finish`)."""
    try:
        for slot_id in set(task.slot_ids):
            start.copied_out[slot_id].synchronize()  # the slot's last batch copied out
        return task, start_unit_messages(assembler, start.slots, task)
    except GpuMemoryError as exc:
        return task, _GpuMemory(task, exc)


def _finish(task: FillTask, unit, device: torch.device) -> list:
    if isinstance(unit, _GpuMemory):
        return unit.messages
    try:
        messages = unit.finish()
        torch.cuda.synchronize(device)  # the unit's frames are in the slots when it replies
    except GpuMemoryError as exc:
        return _GpuMemory(task, exc).messages
    return messages


class _GpuMemory:
    """A unit that ran out of GPU memory in a worker: reported as the unit's failure (the
    loader's process cannot catch the worker's exception typed)."""

    def __init__(self, task: FillTask, exc: GpuMemoryError) -> None:
        self.messages = [Failure(task.first_batch, task.slot_ids, f"in an NVDEC worker: {exc}",
                                 traceback.format_exc(), unit=task.unit)]

    def cancel(self) -> None:
        pass


class NvdecProcessPool(FencedWorkerPool):
    """NVDEC decoding in ``config.nvdec_processes`` worker processes, each filling units into
    GPU slots shared with this process (module docstring)."""

    def __init__(self, config, num_slots: int) -> None:
        import torch.multiprocessing  # noqa: F401 - registers the CUDA IPC reductions

        self.slots = _allocate(config.shapes, num_slots, device=config.gpu)
        self.fences = SlotFences(len(self.slots), config.gpu)
        processes = config.nvdec_processes
        args = [NvdecWorkerStart(i, config, self.slots, self.fences.events) for i in range(processes)]
        super().__init__(nvdec_worker_main, args, processes, server="torch")

    @property
    def splits_blocks(self) -> bool:
        return True  # each process decodes its share of a GOP-local block, as CPU workers do
