"""The combo: CPU worker processes and NVDEC in this process fill batches at once.

Both take units from one queue, oldest first, whenever they have room: a CPU worker holds up
to :data:`CPU_UNITS_PER_WORKER` units, NVDEC up to ``config.units_decoding``. The faster
executor frees up sooner and so takes more units, with nothing to tune. Units mostly of
videos NVDEC cannot decode go to the CPU workers only. ``combo_share`` instead deals a fixed
share of units to NVDEC (seed 000's static split, kept for comparison).

CPU workers write into shared-memory slots, NVDEC into GPU slots: each staging slot has a
buffer set in each memory, and the collector reads each batch's rows from the buffers of
the executor that filled them (:meth:`ComboPool.staged`).
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import logging
import math

from ..decoding import get_executor
from ..errors import WorkerError
from ._assemble import BatchAssembler
from ._config import LoaderConfig
from ._contract import BatchPool
from ._messages import Failure, FillTask, RowsFilled
from ._pool import ProcessPool, WorkerDied, _allocate
from ._worker import UnitMessages, start_unit_messages

log = logging.getLogger(__name__)

#: Units a CPU worker holds at once: one decoding, one waiting, so it never idles between.
CPU_UNITS_PER_WORKER = 2

#: Niceness added to the combo's CPU decode workers. NVDEC is fed by this process's threads
#: (demux, decoder calls, conversion kernels); at equal priority, one CPU decoder per core
#: starved them: on the H100 (16 cores, 1080p random frames) NVDEC alone gave 364 frames/s
#: and the combo 138, NVDEC's share at about 83 (``benchmarks/results/gpu/combo-3``). At a
#: lower priority the CPU decoders take only the cycles the NVDEC side leaves.
COMBO_CPU_NICE = 10


class ComboPool(BatchPool):
    """CPU decoding in worker processes and NVDEC decoding here, pulling from one queue.

    Args:
        config: the loader's config (``backend="combo"``).
        num_slots: staging slots (each with a CPU and a GPU buffer set).
        nvdec_executor: the NVDEC executor, or a lazy stand-in that creates it on first use
            (after the workers started).
        gpu_device: where the GPU buffers live (default the config's GPU).
    """

    def __init__(self, config: LoaderConfig, num_slots: int, nvdec_executor, *,
                 gpu_device=None) -> None:
        self.config = config
        # First: no CUDA before a process start.
        self.cpu = ProcessPool(config, num_slots, nice=COMBO_CPU_NICE)
        try:
            fallback = get_executor("cpu", **config.executor_options("cpu"))
            self.assembler = BatchAssembler.for_config(config, nvdec_executor, fallback=fallback)
            self.gpu_slots = _allocate(config.shapes, num_slots,
                                       device=config.gpu if gpu_device is None else gpu_device)
        except BaseException:
            self.cpu.shutdown()
            raise
        self._unit_ids = itertools.count()
        self._queue: collections.deque[FillTask] = collections.deque()  # either executor
        self._cpu_queue: collections.deque[FillTask] = collections.deque()  # CPU workers only
        self._gpu_queue: collections.deque[FillTask] = collections.deque()  # NVDEC only (share)
        self._cpu_load = [0] * self.cpu.num_workers  # units each worker holds
        self._cpu_units: dict[int, _CpuUnit] = {}  # units the CPU workers hold
        #: Workers that died mid-epoch: their units went to NVDEC, they get no more.
        self.lost_workers: list[str] = []
        self._gpu: collections.deque[UnitMessages] = collections.deque()  # decoding, in order
        self._done: collections.deque = collections.deque()

    @property
    def slots(self) -> list[dict]:
        return self.cpu.slots

    @property
    def ways(self) -> int:
        return self.cpu.num_workers + 1

    @property
    def splits_blocks(self) -> bool:
        return True

    @property
    def rows_per_unit(self) -> int:
        """About a batch's rows over the executors: a CPU worker fills a unit in roughly the
        time NVDEC takes for a batch, so batches taken in order rarely wait on a CPU unit.
        NVDEC gathers consecutive units up to a batch (:meth:`_gather`), keeping its
        per-call batching."""
        return max(1, math.ceil(self._batch_rows / self.ways))

    @property
    def _batch_rows(self) -> int:
        return self.config.batch_size * self.config.rows_per_sample

    def staged(self, slot_id: int, executor: str) -> dict:
        return self.gpu_slots[slot_id] if executor == "nvdec" else self.cpu.slots[slot_id]

    def submit(self, worker: int, task: FillTask) -> None:
        """Queue ``task`` (``worker`` is ignored: whichever executor frees up takes it)."""
        unit = next(self._unit_ids)
        task = dataclasses.replace(task, unit=unit)
        if not self._cpu_alive:  # every CPU worker died: NVDEC takes everything
            self._gpu_queue.append(task)
        elif self._needs_cpu(task):
            self._cpu_queue.append(task)
        elif self.config.combo_share is not None:
            share = float(self.config.combo_share)
            to_gpu = math.floor((unit + 1) * share) > math.floor(unit * share)
            (self._gpu_queue if to_gpu else self._cpu_queue).append(task)
        else:
            self._queue.append(task)
        self._feed()

    def get(self) -> RowsFilled | Failure:
        while True:
            self._feed()
            if self._done:
                return self._done.popleft()
            msg = self._from_cpu(self.cpu.poll())
            if msg is not None:
                return msg
            if self._gpu:  # wait for NVDEC's oldest unit; CPU workers keep their queue
                self._done.extend(self._gpu.popleft().finish())
                continue
            if not self._cpu_alive and not self._cpu_units:
                raise WorkerError("the combo has no CPU worker left and nothing queued on NVDEC, "
                                  "yet the scheduler waits for a unit: an internal error; "
                                  f"lost workers: {self.lost_workers}")
            try:
                msg = self._from_cpu(self.cpu.get())
            except WorkerDied as dead:
                self._carry_on_without(dead)
                continue
            if msg is not None:
                return msg

    @property
    def _cpu_alive(self) -> bool:
        return len(self.cpu.retired) < self.cpu.num_workers

    def _carry_on_without(self, dead: WorkerDied) -> None:
        """A CPU worker died: NVDEC takes the parts of its units not yet reported, and the
        epoch completes (the combo's point: two executors, so one can fail). Messages the
        worker sent before dying are taken first, so no part is filled twice."""
        self.cpu.retire(dead.worker)
        self.lost_workers.append(str(dead))
        log.warning("%s; the combo carries on: NVDEC takes its units", dead)
        self._done.extend(m for m in map(self._from_cpu, self.cpu.drain_ready()) if m is not None)
        self._cpu_load[dead.worker] = math.inf  # never picked again
        for unit in sorted(u for u, held in self._cpu_units.items() if held.worker == dead.worker):
            rest = self._cpu_units.pop(unit).unreported()
            if rest is not None:
                self._gpu_queue.append(rest)
        if not self._cpu_alive:  # no CPU worker left
            self._gpu_queue.extend(self._cpu_queue)
            self._cpu_queue.clear()
        self._gpu_queue = collections.deque(sorted(self._gpu_queue, key=lambda t: t.unit))

    def shutdown(self) -> None:
        while self._gpu:
            self._gpu.popleft().cancel()
        self.cpu.shutdown()
        self.assembler.close()
        self.gpu_slots = []

    # -- dealing units --------------------------------------------------------------------

    def _needs_cpu(self, task: FillTask) -> bool:
        """Whether most of the unit's rows are of videos NVDEC cannot decode. (A unit with a
        few such rows can still go to NVDEC: its CPU fallback decodes them in this process;
        with uniform random sampling over a mixed dataset nearly every unit has some.)"""
        cpu_only = self.config.cpu_only
        if cpu_only is None:
            return False
        routed = sum(int(cpu_only[p.video_indices].sum()) for p in task.plans)
        return 2 * routed > sum(p.batch_size for p in task.plans)

    def _feed(self) -> None:
        """Give the oldest waiting units to executors with room, until none has room."""
        while True:
            worker = min(range(len(self._cpu_load)), key=self._cpu_load.__getitem__)
            cpu_room = self._cpu_load[worker] < CPU_UNITS_PER_WORKER
            gpu_room = len(self._gpu) < self.config.units_decoding
            cpu_task = self._oldest(self._cpu_queue, self._queue) if cpu_room else None
            gpu_task = self._oldest(self._gpu_queue, self._queue) if gpu_room else None
            if cpu_task is None and gpu_task is None:
                return
            if gpu_task is None or (cpu_task is not None and self._cpu_first(cpu_task[1], gpu_task[1])):
                queue, task = cpu_task
                queue.popleft()
                self._to_cpu(worker, task)
            else:
                queue, task = gpu_task
                queue.popleft()
                self._to_gpu(self._gather(queue, task))

    def _gather(self, queue: collections.deque, task: FillTask) -> FillTask:
        """``task`` and the units queued right behind it, up to a batch's rows, as one NVDEC
        task (its parts still report one message each, as the scheduler counts them)."""
        rows = _rows(task)
        while queue and rows + _rows(queue[0]) <= self._batch_rows and not self._needs_cpu(queue[0]):
            more = queue.popleft()
            rows += _rows(more)
            task = dataclasses.replace(task, slot_ids=task.slot_ids + more.slot_ids,
                                       plans=task.plans + more.plans,
                                       row_starts=task.row_starts + more.row_starts)
        return task

    def _cpu_first(self, cpu_task: FillTask, gpu_task: FillTask) -> bool:
        """Both sides have room: the older unit goes first (batches are taken in order); for
        the same unit, the side with the smaller share of its room in use."""
        if cpu_task.unit != gpu_task.unit:
            return cpu_task.unit < gpu_task.unit
        cpu_busy = sum(self._cpu_load) / (CPU_UNITS_PER_WORKER * len(self._cpu_load))
        return cpu_busy <= len(self._gpu) / self.config.units_decoding

    @staticmethod
    def _oldest(*queues):
        heads = [(q, q[0]) for q in queues if q]
        return min(heads, key=lambda h: h[1].unit) if heads else None

    def _to_cpu(self, worker: int, task: FillTask) -> None:
        self._cpu_load[worker] += 1
        self._cpu_units[task.unit] = _CpuUnit(worker, task)
        self.cpu.submit(worker, task)

    def _to_gpu(self, task: FillTask) -> None:
        self._gpu.append(start_unit_messages(self.assembler, self.gpu_slots, task))

    def _from_cpu(self, msg):
        """Book a CPU worker's message; ``None`` for one of a unit already handed to NVDEC
        (a worker taken for dead that was still running: its parts were filled there)."""
        if isinstance(msg, RowsFilled):
            held = self._cpu_units.get(msg.unit)
            if held is None:
                return None
            held.reported.add((msg.batch_index, msg.row_start))
            if len(held.reported) == len(held.task.plans):
                del self._cpu_units[msg.unit]
                self._cpu_load[held.worker] -= 1
        return msg


@dataclasses.dataclass
class _CpuUnit:
    """A unit a CPU worker holds, and which of its parts it has reported."""

    worker: int
    task: FillTask
    reported: set = dataclasses.field(default_factory=set)  # (batch_index, row_start)

    def unreported(self) -> FillTask | None:
        """The task's parts not reported yet, as a task of their own (``None``: all were)."""
        keep = [k for k, (p, a) in enumerate(zip(self.task.plans, self.task.row_starts))
                if (p.batch_index, a) not in self.reported]
        if not keep:
            return None
        t = self.task
        return dataclasses.replace(t, slot_ids=[t.slot_ids[k] for k in keep],
                                   plans=[t.plans[k] for k in keep],
                                   row_starts=[t.row_starts[k] for k in keep])


def _rows(task: FillTask) -> int:
    return sum(p.batch_size for p in task.plans)
