"""The combo: CPU worker processes and NVDEC in this process fill batches at once.

The combo starts processes of two kinds (:func:`combo_split`): ``num_workers`` decode on the
CPU, at a lower priority and off the cores kept for the NVDEC side
(:data:`COMBO_RESERVED_CORES`), and a quarter as many more demux for NVDEC as in separation mode
(:class:`~._pool.SeparationPool`), so NVDEC is fed as fast as when it decodes alone. Both
sides take units from one queue whenever they have room, NVDEC the oldest and a CPU worker
the newest (:meth:`ComboPool._take_for_cpu`): a CPU worker holds up to
:data:`CPU_UNITS_PER_WORKER` units, NVDEC up to ``config.units_decoding`` units decoding plus
one per demux worker being demuxed. The faster side frees up sooner and so takes more units,
with nothing to tune. Units mostly of videos NVDEC cannot decode go to the CPU workers only. ``combo_share`` instead deals a
fixed share of units to NVDEC (seed 000's static split, kept for comparison). With
:data:`COMBO_STEAL`, NVDEC also takes over the CPU unit holding the oldest batch when that
unit is older than everything queued or in flight on NVDEC (:meth:`ComboPool._steal`; off:
on W4 clips it never fired, NVDEC always had an older unit of its own, session15-4).

Measured on the H100 (16 cores, 1080p random frames, ``benchmarks/results/gpu/combo-3`` and
``combo-4``): with NVDEC demuxing in this process's threads and gathering at most one batch
per unit, the combo's NVDEC side filled about 100 frames/s where NVDEC alone filled 300+;
lowering the CPU workers' priority did not change that.

CPU workers write into shared-memory slots, NVDEC into GPU slots: each staging slot has a
buffer set in shared memory, and, while NVDEC fills rows of its batch, one on the GPU (fewer
GPU buffers than slots, bound per unit: :class:`~._pool.StagingBuffers`); the collector reads
each batch's rows from the buffers of the executor that filled them (:meth:`ComboPool.staged`).
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import logging
import math
import os
import time

from ..constants import DEFAULT_LOOKAHEAD_BATCHES
from ..decoding import get_executor
from ..errors import WorkerError
from ._assemble import BatchAssembler
from ._config import LoaderConfig
from ._contract import BatchPool
from ._messages import Failure, FillTask, RowsFilled
from ._pool import ProcessPool, SeparationPool, WorkerDied

log = logging.getLogger(__name__)

#: Units a CPU worker holds at once: one decoding, one waiting, so it never idles between.
CPU_UNITS_PER_WORKER = 2

#: Niceness added to the combo's CPU decode workers. NVDEC is fed by this process's threads
#: (demux, decoder calls, conversion kernels); at equal priority, one CPU decoder per core
#: starved them: on the H100 (16 cores, 1080p random frames) NVDEC alone gave 364 frames/s
#: and the combo 138, NVDEC's share at about 83 (``benchmarks/results/gpu/combo-3``). At a
#: lower priority the CPU decoders take only the cycles the NVDEC side leaves.
COMBO_CPU_NICE = 10

#: How long the combo waits on its CPU workers' queue before looking at NVDEC again, when
#: both have work in flight (NVDEC's completions are futures in this process, with no queue
#: to wait on together with the workers').
BOTH_POLL_SECONDS = 0.002
#: How often that wait checks that the demux workers are alive.
DEMUX_CHECK_SECONDS = 1.0

#: One demux worker for NVDEC per this many of ``num_workers`` (at least one).
COMBO_DEMUX_DIVISOR = 4

#: Whether the demux workers come on top of ``num_workers`` CPU decoders (True) or out of
#: them (False, before session 11). Demuxing is light (NVDEC alone on W4 clips kept 2.3 of
#: 16 cores busy), and the CPU decoders run niced: taken out of ``num_workers`` they left
#: cores idle (the combo's CPU side kept 9 of 16 busy, ``session10-7``); on top, the niced
#: decoders take whatever the NVDEC side leaves.
COMBO_DEMUX_EXTRA = True

#: The fewest rows in a unit (a batch is cut into about one unit per executor). On W4 clips
#: (batch 8) a unit is one clip, decoded from its keyframe; in the combo the CPU workers
#: delivered about half of what they did alone at the same CPU use (``session11-2``).
COMBO_MIN_UNIT_ROWS = 1

#: Cores the combo keeps its CPU decoders off, for the threads feeding NVDEC (this process's
#: decoder threads and the demux workers). ``None``: as many as the combo has demux workers
#: (4 for ``num_workers=16``). On W4 clips (H200, 16 cores), two independent loaders at once,
#: CPU and NVDEC, got 0.68-0.72 of what each gets alone: the CPU side kept its pace, NVDEC fell
#: to about half its own, at nice 0 or 10 alike (``session16-1``): its threads wait for a
#: core at every hand-over (of the GIL, of a unit). With 4 cores kept for them the combo gave
#: 2,036 frames/s against 1,807 with none, in one call (``session16-4``). 0: anywhere.
COMBO_RESERVED_CORES: int | None = None

#: A CPU worker takes a unit only if NVDEC, at its measured pace, would need this many times
#: the CPU's measured unit time to reach that unit (see :meth:`ComboPool._take_for_cpu`).
CPU_HORIZON_SAFETY = 1.5

#: NVDEC takes over the CPU unit holding the oldest batch (older than every unit queued or in
#: flight on NVDEC, none of its parts reported yet), when at their measured paces it would
#: finish it before the CPU worker (:meth:`ComboPool._steal`). Batches are delivered in order,
#: so one slow CPU unit (a clip decoded from a keyframe up to 250 frames back on W4) could hold
#: every later batch. Off: on the H200 it never fired in six W4 runs (sessions 14-15), NVDEC
#: always having an older unit of its own in flight (``session15-4/NOTE.md``).
COMBO_STEAL = False


def cpu_decoder_cores(reserved: int) -> tuple[int, ...] | None:
    """The cores the combo's CPU decoders may run on: this process's cores less the first
    ``reserved`` physical cores (with SMT, a core's sibling threads go with it:
    :func:`physical_cores`); ``None`` (anywhere) when nothing is reserved or fewer than two
    logical cores would remain (a small machine keeps every core for both sides, as before).
    Several loaders on one machine (a rank per GPU) each keep the same first cores: their
    NVDEC sides share them."""
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if reserved <= 0:
        return None
    left = [c for group in physical_cores(cores)[reserved:] for c in group]
    return tuple(sorted(left)) if len(left) >= 2 else None


def physical_cores(cores: list[int]) -> list[tuple[int, ...]]:
    """``cores`` (logical CPUs) grouped by physical core, the SMT siblings of each together
    (Linux's ``topology/thread_siblings_list``), in order of their first CPU; one group per
    CPU where the topology cannot be read."""
    groups: dict[tuple[int, ...], None] = {}
    for c in cores:
        groups[tuple(sorted(_siblings(c) & set(cores) | {c}))] = None
    return sorted(groups, key=min)


def _siblings(cpu: int) -> set[int]:
    """The logical CPUs sharing ``cpu``'s physical core (itself alone if unknown)."""
    try:
        with open(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list") as f:
            text = f.read().strip()
    except OSError:
        return {cpu}
    out: set[int] = set()
    for item in filter(None, text.split(",")):
        a, _, b = item.partition("-")
        out.update(range(int(a), int(b or a) + 1))
    return out


def combo_split(num_workers: int) -> tuple[int, int]:
    """``(CPU decode workers, demux workers)`` the combo starts for ``num_workers``: the
    CPU decoders, and a quarter as many demux workers (at least one of each)."""
    demux = max(1, num_workers // COMBO_DEMUX_DIVISOR)
    if COMBO_DEMUX_EXTRA:
        return max(1, num_workers), demux
    return max(1, num_workers - demux), demux


class ComboPool(BatchPool):
    """CPU decoding in worker processes and NVDEC decoding here (fed by demux workers),
    pulling from one queue.

    Args:
        config: the loader's config (``backend="combo"``).
        num_slots: staging slots (each with a CPU and a GPU buffer set).
        nvdec_executor: the NVDEC executor, or a lazy stand-in that creates it on first use
            (after the workers started).
        gpu_device: where the GPU buffers live (default the config's GPU).
    """

    def __init__(self, config: LoaderConfig, num_slots: int, nvdec_executor, *,
                 gpu_device=None, gpu_buffers: int | None = None,
                 counters: dict | None = None) -> None:
        self.config = config
        num_cpu, num_demux = combo_split(config.num_workers)
        # Workers first: no CUDA before a process start (both kinds are fork-server forks).
        self.cpu = ProcessPool(dataclasses.replace(config, num_workers=num_cpu), num_slots,
                               nice=COMBO_CPU_NICE,
                               cpus=cpu_decoder_cores(num_demux if COMBO_RESERVED_CORES is None
                                                      else COMBO_RESERVED_CORES))
        try:
            fallback = get_executor("cpu", **config.executor_options("cpu"))
            assembler = BatchAssembler.for_config(config, nvdec_executor, fallback=fallback)
            # NVDEC's buffers are bound only while its units fill them (StagingBuffers): the
            # CPU side's units and NVDEC's units being demuxed hold none.
            self.gpu = SeparationPool(dataclasses.replace(config, num_workers=num_demux), assembler,
                                      num_slots, device=gpu_device, num_buffers=gpu_buffers,
                                      counters=counters)
        except BaseException:
            self.cpu.shutdown()
            raise
        self.assembler, self.gpu_slots = assembler, self.gpu.slots
        #: NVDEC's units in flight at once: decoding, plus one being demuxed per demux worker.
        self.gpu_room = config.units_decoding + num_demux
        #: Rows NVDEC gathers into one unit: ``lookahead`` batches, as in separation mode
        #: (GOPs are shared within a unit; one batch per unit decoded more per delivered frame).
        self.gather_rows = (config.lookahead or DEFAULT_LOOKAHEAD_BATCHES) * self._batch_rows
        self._unit_ids = itertools.count()
        self._queue = _Units()  # either executor: NVDEC takes the oldest, the CPU the newest
        self._cpu_queue: collections.deque[FillTask] = collections.deque()  # CPU workers only
        self._gpu_queue: collections.deque[FillTask] = collections.deque()  # NVDEC only (share)
        self._cpu_load = [0] * self.cpu.num_workers  # units each worker holds
        self._cpu_units: dict[int, _CpuUnit] = {}  # units the CPU workers hold
        #: Units NVDEC took over from a live CPU worker (:meth:`_steal`), until that worker
        #: has reported every part (its messages are dropped); and per slot, how many of their
        #: parts it may still write there: no CPU unit writes into such a slot meanwhile.
        self._stolen: dict[int, _CpuUnit] = {}
        self._fenced: collections.Counter = collections.Counter()
        #: Units NVDEC took over from a live CPU worker.
        self.steals = 0
        #: Workers that died mid-epoch: their units went to NVDEC, they get no more.
        self.lost_workers: list[str] = []
        self._gpu_parts: dict[int, int] = {}  # NVDEC's units in flight: parts not reported
        self._next_demux = 0  # round-robin over the demux workers
        self._pace = _Pace()
        self._next_demux_check = 0.0
        #: Seconds a CPU worker had room but got no unit, by reason ("queue empty": nothing
        #: dispatched is waiting; "horizon": NVDEC would reach the newest unit first), and
        #: NVDEC's in flight at its limit: what the bench reads to see why a side idles.
        self.idle_s: collections.Counter = collections.Counter()
        self._idle_state: tuple[str | None, float] = (None, time.monotonic())
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
        return max(COMBO_MIN_UNIT_ROWS, math.ceil(self._batch_rows / self.ways))

    @property
    def _batch_rows(self) -> int:
        return self.config.batch_size * self.config.rows_per_sample

    def staged(self, slot_id: int, executor: str) -> dict:
        return self.gpu_slots[slot_id] if executor == "nvdec" else self.cpu.slots[slot_id]

    def release(self, slot_id: int) -> None:
        self.gpu.release(slot_id)  # the CPU side's shared slots are all its own

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
            if self._gpu_parts:
                msg = self._wait_on_both()
                if msg is not None:
                    return msg
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

    def _wait_on_both(self):
        """The next message from NVDEC or a CPU worker, whichever comes first, or ``None``
        after a short wait (the caller deals units again). Blocking on NVDEC's oldest unit
        instead left the CPU workers without new units for as long as it took: on W4 clips
        (small CPU units, large NVDEC ones) the combo ran at NVDEC's speed alone
        (``benchmarks/results/gpu/session8-1``)."""
        while True:
            msg = self.gpu.poll_filled()
            if msg is not None:
                return self._from_gpu(msg)
            if not self._gpu_parts:
                return None
            try:
                msg = self.cpu.poll(timeout=BOTH_POLL_SECONDS)
            except WorkerDied as dead:
                self._carry_on_without(dead)
                return None
            if msg is not None:
                return self._from_cpu(msg)
            if time.monotonic() >= self._next_demux_check:
                self._next_demux_check = time.monotonic() + DEMUX_CHECK_SECONDS
                self.gpu.check_alive()  # a dead demux worker would leave its unit waiting

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
        for held in [h for h in self._stolen.values() if h.worker == dead.worker]:
            self._end_stolen(held)  # a dead worker writes nothing more
        for unit in sorted(u for u, held in self._cpu_units.items() if held.worker == dead.worker):
            rest = self._cpu_units.pop(unit).unreported()
            if rest is not None:
                self._gpu_queue.append(rest)
        if not self._cpu_alive:  # no CPU worker left
            self._gpu_queue.extend(self._cpu_queue)
            self._cpu_queue.clear()
        self._gpu_queue = collections.deque(sorted(self._gpu_queue, key=lambda t: t.unit))

    def shutdown(self) -> None:
        try:
            self.gpu.shutdown()  # cancels NVDEC's units, stops the demux workers, closes the assembler
        finally:
            self.cpu.shutdown()
            self.gpu_slots = []
            self._gpu_parts.clear()

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
        """Give waiting units to executors with room, until neither takes one: NVDEC the
        oldest, CPU workers the newest of the shared queue (see :meth:`_take_for_cpu`)."""
        while True:
            took = False
            head = self._oldest(self._gpu_queue, self._queue)
            # A CPU unit older than every queued one holds back every batch NVDEC would
            # fill next: taken over first, whatever NVDEC's room (session15-1: only
            # considered with nothing queued, no unit was ever taken over, since the shared
            # queue is rarely empty while NVDEC sits at its room).
            if (victim := self._steal_candidate(head[1] if head else None)) is not None:
                self._steal(victim)
                took = True
            elif head is not None and (len(self._gpu_parts) < self.gpu_room or self._overdue(head[1])):
                queue, task = head
                queue.popleft()
                self._to_gpu(self._gather(queue, task))
                took = True
            worker = min(range(len(self._cpu_load)), key=self._cpu_load.__getitem__)
            room = self._cpu_load[worker] < CPU_UNITS_PER_WORKER
            if room:
                task = self._take_for_cpu()
                if task is not None:
                    self._to_cpu(worker, task)
                    took = True
            if not took:
                self._note_idle(None if not room else "queue empty" if not self._queue else "horizon")
                return

    def _overdue(self, task: FillTask) -> bool:
        """Whether NVDEC must take ``task`` beyond its room: it holds rows of a batch no later
        than any whose GPU buffer is held, so none of those can be delivered, and free a
        buffer, before it is filled (a dead worker's units, queued after NVDEC's own)."""
        oldest = self.gpu.slots.oldest_batch()
        return oldest is not None and task.first_batch <= oldest

    def _note_idle(self, reason: str | None) -> None:
        """Add the time since the last call to the reason the CPU side was idle then."""
        now = time.monotonic()
        last, since = self._idle_state
        if last is not None:
            self.idle_s[last] += now - since
        self._idle_state = (reason, now)

    def _take_for_cpu(self) -> FillTask | None:
        """The unit a free CPU worker takes, or ``None`` (it waits).

        Units only the CPU may take (NVDEC cannot decode their files, or ``combo_share``
        dealt them) go oldest first. From the shared queue it takes the *newest* unit, and
        only if NVDEC, at its measured pace, would not reach that unit before the CPU is
        expected to finish it (:data:`CPU_HORIZON_SAFETY`). Batches are delivered in order,
        so a CPU unit in a batch NVDEC has caught up with holds every later batch back:
        taking the oldest unit, as before, gave bursts of batches between 2-5 s stalls on
        the H100 (combo 376-414 frames/s against NVDEC alone 599, ``combo-5``).
        """
        for k, task in enumerate(self._cpu_queue):
            # A unit into a fenced slot (a taken-over unit's worker may still write there)
            # waits for its fence; the next one goes meanwhile.
            if not self._fences(task):
                del self._cpu_queue[k]
                return task
        if not self._queue:
            return None
        tail = self._queue[-1]
        if self._queue.rows - _rows(tail) < self._pace.horizon_rows() or self._fences(tail):
            return None  # a unit into a fenced slot is NVDEC's: it writes into GPU buffers
        return self._queue.pop()

    def _fences(self, task: FillTask) -> bool:
        return any(self._fenced.get(slot, 0) > 0 for slot in task.slot_ids)

    # -- NVDEC taking over a slow CPU unit --------------------------------------------------

    def _steal_candidate(self, head: FillTask | None = None) -> int | None:
        """The CPU unit NVDEC should take over now, or ``None``: with :data:`COMBO_STEAL`,
        the CPU unit holding the oldest batch, if it is older than every unit NVDEC has in
        flight and than ``head``, the oldest unit queued (so it holds back every batch NVDEC
        would fill next; and one taken over is in flight, so units are taken over one at a
        time), none of its parts is reported yet, and NVDEC would fill them (at its measured
        rows/s) before the CPU worker is expected to (:func:`_expected_left`)."""
        if not COMBO_STEAL or not self._cpu_units:
            return None
        pace = self._pace
        if pace.gpu_rows_per_s is None or pace.cpu_unit_s is None:
            return None
        unit = min(self._cpu_units, key=lambda u: (self._cpu_units[u].task.first_batch, u))
        if self._gpu_parts and unit > min(self._gpu_parts):
            return None  # NVDEC works on an older unit itself: this one holds nothing back yet
        if head is not None and head.unit < unit:
            return None  # an older unit waits for NVDEC: that one comes first
        held = self._cpu_units[unit]
        if held.reported:
            # A worker reports a unit's parts together once all are written: the others are
            # already on their way, and taking the unit over would only decode it twice.
            return None
        if self._needs_cpu(held.task):
            return None
        cpu_left = _expected_left(pace.cpu_unit_s, time.monotonic() - held.started)
        return unit if _rows(held.task) / pace.gpu_rows_per_s < cpu_left else None

    def _steal(self, unit: int) -> None:
        """NVDEC fills CPU unit ``unit`` (none of its parts reported: see
        :meth:`_steal_candidate`). Its worker goes on with it (a task cannot be called back)
        and keeps the load; what it reports for the unit is dropped (:meth:`_from_cpu`), so
        the scheduler gets one message per part. Until it has reported every part, the unit's
        slots are fenced: it may still write into their shared memory, so no CPU unit is dealt
        into them (NVDEC writes into its GPU buffers, and the collector reads each part from
        the executor that reported it)."""
        held = self._cpu_units.pop(unit)
        self._fenced.update(held.task.slot_ids)
        self._stolen[unit] = held
        self.steals += 1
        # Beyond NVDEC's room, and decoded before its units not started yet: those hold rows
        # of later batches, and when the loader stalls on this unit they wait for staging
        # buffers that only its batch's delivery frees (in session14-4, NVDEC at its room
        # with such units let no unit be taken over).
        self._to_gpu(held.task, first=True)

    def _end_stolen(self, held: _CpuUnit) -> None:
        """Lift the fences of a unit NVDEC took over: its worker writes no more."""
        del self._stolen[held.task.unit]
        self._fenced.subtract(held.task.slot_ids)
        for slot in held.task.slot_ids:
            if self._fenced[slot] <= 0:
                del self._fenced[slot]

    def _gather(self, queue: collections.deque, task: FillTask) -> FillTask:
        """``task`` and the units queued right behind it, up to :attr:`gather_rows`, as one
        NVDEC task (its parts still report one message each, as the scheduler counts them)."""
        rows = _rows(task)
        while queue and rows + _rows(queue[0]) <= self.gather_rows and not self._needs_cpu(queue[0]):
            more = queue.popleft()
            rows += _rows(more)
            task = dataclasses.replace(task, slot_ids=task.slot_ids + more.slot_ids,
                                       plans=task.plans + more.plans,
                                       row_starts=task.row_starts + more.row_starts)
        return task

    @staticmethod
    def _oldest(*queues):
        heads = [(q, q[0]) for q in queues if q]
        return min(heads, key=lambda h: h[1].unit) if heads else None

    def _to_cpu(self, worker: int, task: FillTask) -> None:
        self._cpu_load[worker] += 1
        self._cpu_units[task.unit] = _CpuUnit(worker, task)
        self.cpu.submit(worker, task)

    def _to_gpu(self, task: FillTask, *, first: bool = False) -> None:
        if not self._gpu_parts:
            self._pace.gpu_busy(True)
        self._gpu_parts[task.unit] = len(task.plans)
        self.gpu.submit(self._next_demux, task, first=first)
        self._next_demux = (self._next_demux + 1) % self.gpu.num_workers

    def _from_gpu(self, msg):
        """Book NVDEC's message. A :class:`Failure` ends the epoch (the loader raises it); its
        unit is the one it names, else the oldest in flight (NVDEC reports units in
        submission order, but for one taken over, :meth:`_steal`)."""
        if isinstance(msg, RowsFilled):
            self._gpu_parts[msg.unit] -= 1
            if not self._gpu_parts[msg.unit]:
                del self._gpu_parts[msg.unit]
            self._pace.gpu_filled(len(msg.valid))
        else:  # its unit when NVDEC names it (a unit taken over is decoded out of turn)
            unit = msg.unit if msg.unit in self._gpu_parts else next(iter(self._gpu_parts))
            del self._gpu_parts[unit]
        if not self._gpu_parts:
            self._pace.gpu_busy(False)
        return msg

    def _from_cpu(self, msg):
        """Book a CPU worker's message; ``None`` for one of a unit NVDEC filled instead: a
        unit it took over (:meth:`_steal`; its worker's load and the unit's fences go once
        the worker has reported every part, or failed the unit), or one of a worker taken for
        dead that was still running."""
        if not isinstance(msg, (RowsFilled, Failure)):
            return msg
        stolen = self._stolen.get(msg.unit)
        if isinstance(msg, Failure):
            if stolen is None:
                return msg
            self._end_stolen(stolen)  # NVDEC fills its parts (and meets the same error, if any)
            self._cpu_load[stolen.worker] -= 1
            return None
        held = self._cpu_units.get(msg.unit) or stolen
        if held is None:
            return None
        held.reported.add((msg.batch_index, msg.row_start))
        if len(held.reported) == len(held.task.plans):
            if held is stolen:
                self._end_stolen(held)
            else:
                del self._cpu_units[msg.unit]
            self._cpu_load[held.worker] -= 1
            self._pace.cpu_done(time.monotonic() - held.started)
        return None if held is stolen else msg


@dataclasses.dataclass
class _CpuUnit:
    """A unit a CPU worker holds, and which of its parts it has reported."""

    worker: int
    task: FillTask
    reported: set = dataclasses.field(default_factory=set)  # (batch_index, row_start)
    started: float = dataclasses.field(default_factory=time.monotonic)

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


def _expected_left(mean_s: float, elapsed_s: float) -> float:
    """Seconds a CPU unit that has run ``elapsed_s`` is expected to need still, units taking
    ``mean_s`` on average: the mean less its age, but never less than its age. Unit times
    have a long tail (a clip decoded from a keyframe up to 250 frames back; on W4 the CPU's
    batch gaps reach 5.8 s at the 99th percentile), so a unit past half the mean is expected
    to take about as long again as it has run. The mean less its age alone goes negative past
    the mean, and NVDEC never took over the units that held the combo back (0 steals in three
    W4 runs, ``session14-1``)."""
    return max(mean_s - elapsed_s, elapsed_s)


def _rows(task: FillTask) -> int:
    return sum(p.batch_size for p in task.plans)


class _Units(collections.deque):
    """Queued units, keeping the sum of their rows (appended and popped at either end)."""

    rows = 0

    def append(self, task: FillTask) -> None:
        super().append(task)
        self.rows += _rows(task)

    def popleft(self) -> FillTask:
        task = super().popleft()
        self.rows -= _rows(task)
        return task

    def pop(self) -> FillTask:
        task = super().pop()
        self.rows -= _rows(task)
        return task


class _Pace:
    """NVDEC's rows per second while it has work, and how long a CPU unit takes from
    hand-out to its last report (moving averages): what :meth:`ComboPool._take_for_cpu`
    weighs. NVDEC's pace counts busy time only: its stalls behind a late CPU unit would
    otherwise lower it, shrink the horizon and cause more such stalls."""

    WINDOW_S = 0.5  # NVDEC's pace is sampled over at least this much busy time
    WEIGHT = 0.3  # of the newest sample in the moving averages

    def __init__(self) -> None:
        self.gpu_rows_per_s: float | None = None
        self.cpu_unit_s: float | None = None
        self._busy_since: float | None = None
        self._busy_s = 0.0
        self._rows = 0

    def gpu_busy(self, busy: bool) -> None:
        now = time.monotonic()
        if busy and self._busy_since is None:
            self._busy_since = now
        elif not busy and self._busy_since is not None:
            self._busy_s += now - self._busy_since
            self._busy_since = None

    def gpu_filled(self, rows: int) -> None:
        self._rows += rows
        now = time.monotonic()
        busy = self._busy_s + (now - self._busy_since if self._busy_since is not None else 0.0)
        if busy >= self.WINDOW_S:
            self.gpu_rows_per_s = self._average(self.gpu_rows_per_s, self._rows / busy)
            self._rows, self._busy_s = 0, 0.0
            if self._busy_since is not None:
                self._busy_since = now

    def cpu_done(self, seconds: float) -> None:
        self.cpu_unit_s = self._average(self.cpu_unit_s, seconds)

    def horizon_rows(self) -> float:
        """Rows NVDEC fills while a CPU unit is filled, with the safety factor; 0 until
        both are measured."""
        if self.gpu_rows_per_s is None or self.cpu_unit_s is None:
            return 0.0
        return CPU_HORIZON_SAFETY * self.gpu_rows_per_s * self.cpu_unit_s

    def _average(self, old: float | None, new: float) -> float:
        return new if old is None else (1 - self.WEIGHT) * old + self.WEIGHT * new
