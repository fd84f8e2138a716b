"""Where batches are filled: CPU worker processes, the calling process, or separation mode.

Every pool implements :class:`~._contract.BatchPool`: ``submit(worker, task)`` hands over a
:class:`~._messages.FillTask` (whole batches, or row ranges of batches), and ``get()``
returns one :class:`~._messages.RowsFilled` per plan of it, or a
:class:`~._messages.Failure`. Staging slots are preallocated once; their number bounds the
batches in flight.
"""

from __future__ import annotations

import bisect
import collections
import contextlib
import dataclasses
import itertools
import math
import queue
import struct
import sys
import time
from multiprocessing.connection import wait

import numpy as np
import torch

from .._utils._procs import guard_hint, worker_context
from ..constants import QUEUE_POLL_SECONDS, WORKER_JOIN_SECONDS, WORKER_START_SECONDS
from ..decoding import describe_bytes, gpu_memory_error, is_gpu_out_of_memory
from ..errors import WorkerError
from ..planning import plan_tasks
from ._assemble import BatchAssembler
from ._config import LoaderConfig
from ._contract import BatchPool
from ._demux import demux_worker_main
from ._entry import bootstrap
from ._messages import (
    STOP,
    CpuWorkerStart,
    DemuxTask,
    DemuxWorkerStart,
    Failure,
    FillTask,
    PacketsDemuxed,
    Ready,
    RowsFilled,
)
from ._payloads import discard, discard_prefixed, segment_prefix, unpack_payloads
from ._shared_slots import SharedSlots
from ._worker import fill_unit_messages, start_unit_messages, worker_main

#: Seconds between two checks of the workers' liveness from :meth:`WorkerProcesses.poll`
#: and ``get`` (a dead worker is reported this much later at most).
ALIVE_CHECK_SECONDS = 0.05


def cpu_worker_server(config: LoaderConfig) -> str:
    """The fork server CPU decode workers come from: ``"decode"`` (no torch), or ``"torch"``
    with NVTX ranges on, which are torch's (``torch.cuda.nvtx``): there every worker shares
    the server's torch instead of importing it in its first unit."""
    return "torch" if config.nvtx else "decode"


def _allocate(shapes: dict[str, tuple], num_slots: int, *, device=None) -> list:
    """``num_slots`` staging slots, each a uint8 tensor of ``shapes[name]`` per output, on
    ``device`` (CPU workers' slots are :class:`~._shared_slots.SharedSlots` instead).

    Raises:
        GpuMemoryError: the GPU has no room for them (naming the slots' bytes).
    """
    slots: list[dict] = []
    try:
        for _ in range(num_slots):
            slots.append({n: torch.zeros(s, dtype=torch.uint8, device=device) for n, s in shapes.items()})
        return slots
    except Exception as exc:
        if not is_gpu_out_of_memory(exc):
            raise
        made = len(slots)
        slots.clear()  # a traceback keeps this frame and its locals alive: not the slots made
        raise gpu_memory_error(exc, _slots_what(shapes, num_slots, made), device) from exc


def _slots_what(shapes: dict[str, tuple], num_slots: int, made: int) -> str:
    """The staging slots, for a :class:`GpuMemoryError`: how many, their bytes, their shapes."""
    each = sum(math.prod(s) for s in shapes.values())
    outputs = ", ".join(f"{name!r} {'x'.join(map(str, s))}" for name, s in shapes.items())
    return (f"the loader's staging slots: {num_slots} slots of {describe_bytes(each)} each "
            f"({describe_bytes(each * num_slots)} in all, {made} made; uint8 {outputs}: "
            "batch rows x frames x height x width x 3)")


class StagingBuffers:
    """The scheduler's staging slots over fewer GPU buffers.

    In separation mode most of a unit's life is spent being demuxed by a CPU worker, which
    needs no GPU buffer; only the units decoding (``units_decoding``) and the batches waiting
    to be delivered do. So a slot is *bound* to a buffer when a unit that fills it starts
    decoding (:meth:`bind`) and unbound when the scheduler has delivered its batch
    (:meth:`release`). ``len()`` is the scheduler's slot count, ``staging[slot]`` a bound
    slot's buffers (``{output: uint8 tensor}``, as a plain slot list gives them).

    The buffers are allocated at once, so a GPU without room for them fails before the first
    batch, naming them. When a unit must start for the loader to make progress and no buffer
    is free (which the buffer count rules out with NVDEC alone; see
    :meth:`SeparationPool._reserve`), an extra buffer is made for it and dropped when its
    slot is released, and ``counters["overflows"]`` counts it.

    Args:
        shapes: each output's staging shape.
        num_slots: the scheduler's slots.
        num_buffers: GPU buffers (``<= num_slots``).
        device: where the buffers live.
        counters: a dict updated in place: ``buffers``, ``in_use`` (bound now),
            ``peak_in_use`` and ``overflows`` (the loader shows it as ``stats["gpu_staging"]``).
    """

    def __init__(self, shapes: dict[str, tuple], num_slots: int, num_buffers: int, *,
                 device=None, counters: dict | None = None) -> None:
        self.shapes, self.device, self._num_slots = shapes, device, int(num_slots)
        self.buffers = _allocate(shapes, min(num_buffers, num_slots), device=device)
        self._free = list(range(len(self.buffers)))[::-1]
        self._bound: dict[int, int] = {}  # slot -> buffer index
        self._extra: dict[int, dict] = {}  # slot -> a buffer made beyond the count
        self._batch: dict[int, int] = {}  # slot -> the batch it holds
        self.counters = counters if counters is not None else {}
        self.counters.update(buffers=len(self.buffers), in_use=0,
                             peak_in_use=self.counters.get("peak_in_use", 0),
                             overflows=self.counters.get("overflows", 0))

    def __len__(self) -> int:
        return self._num_slots

    def __getitem__(self, slot: int) -> dict:
        if slot in self._bound:
            return self.buffers[self._bound[slot]]
        if slot in self._extra:
            return self._extra[slot]
        raise IndexError(f"staging slot {slot} holds no GPU buffer (it is bound when a unit that "
                         "fills it starts decoding): an internal error of vidloader's pool")

    def missing(self, slot_ids) -> int:
        """Distinct slots of ``slot_ids`` that hold no buffer yet."""
        return len({s for s in slot_ids if s not in self._bound and s not in self._extra})

    def can_bind(self, slot_ids) -> bool:
        """Whether every slot of ``slot_ids`` can hold a buffer without an extra one."""
        return self.missing(slot_ids) <= len(self._free)

    def oldest_batch(self) -> int | None:
        """The lowest batch a bound slot holds (``None``: no slot is bound)."""
        return min(self._batch.values(), default=None)

    def bind(self, slot_ids, batches, *, extra: bool = False) -> None:
        """Give each slot of ``slot_ids`` (holding ``batches``, one each) a buffer, unless it
        has one; with ``extra``, make buffers beyond the count when none is free.

        Raises:
            GpuMemoryError: an extra buffer does not fit on the GPU.
        """
        for slot, batch in zip(slot_ids, batches):
            if slot in self._bound or slot in self._extra:
                continue
            if self._free:
                self._bound[slot] = self._free.pop()
            elif extra:
                self._extra[slot] = _allocate(self.shapes, 1, device=self.device)[0]
                self.counters["overflows"] += 1
            else:
                raise RuntimeError(f"no free GPU staging buffer for slot {slot}: an internal "
                                   "error of vidloader's pool (can_bind was not asked)")
            self._batch[slot] = batch
        in_use = len(self._bound) + len(self._extra)
        self.counters["in_use"] = in_use
        self.counters["peak_in_use"] = max(self.counters["peak_in_use"], in_use)

    def release(self, slot: int) -> None:
        """The slot's batch was delivered: its buffer is free again (an extra one is dropped)."""
        self._batch.pop(slot, None)
        if slot in self._bound:
            self._free.append(self._bound.pop(slot))
        self._extra.pop(slot, None)
        self.counters["in_use"] = len(self._bound) + len(self._extra)


class InlinePool(BatchPool):
    """Fills batches synchronously in the calling process (``num_workers=0``)."""

    def __init__(self, assembler: BatchAssembler, shapes: dict, num_slots: int, device=None) -> None:
        self.assembler = assembler
        try:
            self.slots = _allocate(shapes, num_slots, device=device)
        except BaseException:  # no pool to shut down: close the executors here
            assembler.close()
            raise
        self._done: collections.deque = collections.deque()

    @property
    def ways(self) -> int:
        return 1

    def submit(self, worker: int, task: FillTask) -> None:
        self._done.extend(fill_unit_messages(self.assembler, self.slots, task))

    def get(self):
        return self._done.popleft()

    def shutdown(self) -> None:
        self.assembler.close()


#: Handles one ``multiprocessing.connection.wait`` takes at once on Windows (its
#: ``WaitForMultipleObjects`` stops at 64): more workers are waited on in chunks.
_WAIT_CHUNK = 60


def _wait(objects: list, timeout: float) -> list:
    """``multiprocessing.connection.wait(objects, timeout)``; on Windows, with more than
    :data:`_WAIT_CHUNK` objects, the chunks are polled in turn until one is ready."""
    if sys.platform != "win32" or len(objects) <= _WAIT_CHUNK:
        return wait(objects, timeout)
    deadline = time.monotonic() + timeout
    while True:
        ready = [o for k in range(0, len(objects), _WAIT_CHUNK) for o in wait(objects[k:k + _WAIT_CHUNK], 0)]
        if ready or time.monotonic() >= deadline:
            return ready
        time.sleep(0.002)


class WorkerDied(WorkerError):
    """A worker process died (killed, out of memory, crashed in FFmpeg); ``worker`` is its
    number. A pool with another executor (the combo) can retire it and carry on."""

    def __init__(self, message: str, *, worker: int) -> None:
        super().__init__(message)
        self.worker = worker


class WorkerProcesses:
    """``num_workers`` processes forked from one of vidloader's fork servers
    (:mod:`.._utils._procs`: a clean interpreter that imported numpy and PyAV once, torch only
    if it is the ``"torch"`` server, never CUDA, and never runs the user's main module),
    each with its own task queue and its own result queue. ``get`` never hangs: it notices
    a dead worker and raises :class:`WorkerError`.

    A worker's arguments (the index, the staging slots) travel as the first message of its task
    queue, not as ``Process`` arguments: ``Process.start()`` writes those into a pipe that the
    child reads only once it runs, so when they passed the pipe's 64 KiB the parent waited for
    each child in turn (with spawned workers importing torch, 45 s for 16 workers on the H200);
    through the queue, a feeder thread per worker writes them while the workers start.

    Each worker has a result queue of its own, and this process closes its copy of each
    queue's write end once the workers started. With one queue shared by all workers, a
    worker killed while it wrote a result (SIGKILL, the OOM killer) could leave the queue's
    write lock held, so no other worker's result came through again, or leave half a message
    that the reader waited on for good: the combo hung in about 1 of 7 runs of a test that
    kills a CPU worker. Now such a worker's queue alone ends, in an end-of-file.
    """

    def __init__(self, target, args: list, num_workers: int, *, server: str = "decode",
                 inherited=None) -> None:
        """``inherited``: given to every worker with its fork request (a ``Process``
        argument, so a file descriptor in it reaches the worker through the fork server, see
        ``_shared_slots``) and passed to ``target`` as a fourth argument."""
        ctx = worker_context(server)
        self.num_workers = num_workers
        self.result_qs = [ctx.Queue() for _ in range(num_workers)]
        self._backlog: collections.deque = collections.deque()
        self.task_qs = [ctx.Queue() for _ in range(num_workers)]
        self.procs = [
            ctx.Process(
                target=bootstrap, args=(target, self.task_qs[i], self.result_qs[i], inherited),
                daemon=True, name=f"vidloader-worker-{i}",
            )
            for i in range(num_workers)
        ]
        self._closed = False
        self.retired: set[int] = set()  # dead workers a pool chose to carry on without
        self._ended: set[int] = set()  # workers whose result queue reached its end
        self._alive_checked_at = -math.inf  # when _check_alive last asked every worker
        self._last_read = -1  # the worker read last: the next read starts after it
        try:
            for q, a in zip(self.task_qs, args):
                q.put(a)
            for p in self.procs:
                p.start()
            # The workers hold their own copies of the write ends (the fork server passed
            # them on at start): with this process's closed, a worker's exit ends its queue.
            for q in self.result_qs:
                q._writer.close()
            self._wait_ready()
        except BaseException:
            self.shutdown()
            raise

    def _wait_ready(self) -> None:
        ready, deadline = 0, time.monotonic() + WORKER_START_SECONDS
        while ready < self.num_workers:
            try:
                msg = self.get(deadline=deadline)
            except WorkerError as exc:
                raise WorkerError(f"{guard_hint()}{exc}") from None
            if isinstance(msg, Ready):
                ready += 1
            elif isinstance(msg, Failure):
                raise WorkerError(f"a worker failed to start: {msg.message}",
                                  remote_traceback=msg.traceback)

    def put(self, worker: int, message) -> None:
        self.task_qs[worker].put(message)

    def get(self, deadline: float | None = None):
        """Next message; raises :class:`WorkerError` if a worker died (never hangs)."""
        if self._backlog:
            return self._backlog.popleft()
        while True:
            msg = self._next_result(QUEUE_POLL_SECONDS)
            if msg is not None:
                return msg
            self._check_alive()
            if deadline is not None and time.monotonic() > deadline:
                raise WorkerError(f"workers did not start within {WORKER_START_SECONDS:.0f} s") from None

    def poll(self, timeout: float = 0.0):
        """The next message if one is here (or comes within ``timeout`` seconds), else
        ``None``. With a timeout, a dead worker raises :class:`WorkerDied` as in :meth:`get`."""
        if self._backlog:
            return self._backlog.popleft()
        msg = self._next_result(timeout)
        if msg is None and timeout > 0:
            self._check_alive()
        return msg

    def _next_result(self, timeout: float):
        """A message from whichever worker has one (taking turns when several have), waiting
        up to ``timeout`` seconds; ``None`` if none came. A queue that ends (its worker exited,
        perhaps mid-message) is read no more: :meth:`_check_alive` reports its worker."""
        readers = self._open_readers()
        if not readers:
            time.sleep(timeout)
            return None
        ready = sorted(readers[r] for r in _wait(list(readers), timeout))
        for i in ready[bisect.bisect_right(ready, self._last_read):] + ready:
            self._last_read = i
            try:
                msg = self.result_qs[i].get_nowait()
            except queue.Empty:
                continue
            except (EOFError, OSError, struct.error):
                self._ended.add(i)
                continue
            return self._unpack(msg)
        return None

    def _open_readers(self) -> dict:
        """The receiving ends of the result queues that have not ended, each to its worker."""
        return {self.result_qs[i]._reader: i for i in range(self.num_workers) if i not in self._ended}

    def check_alive(self) -> None:
        """Raise :class:`WorkerDied` if a worker that was not retired has died (asked now,
        whenever it was last asked)."""
        self._check_alive(force=True)

    def _unpack(self, msg):
        """The first of a unit's messages (they arrive together as a list); the rest wait."""
        if isinstance(msg, list):
            self._backlog.extend(msg[1:])
            msg = msg[0]
        return msg

    def _check_alive(self, *, force: bool = False) -> None:
        # At most every ALIVE_CHECK_SECONDS, unless a queue ended (its worker is exiting): a
        # poll with a short timeout comes here after each empty wait, and asking each worker
        # (``is_alive`` builds a selector per call) 500 times a second held the GIL the
        # NVDEC decoder threads of the combo's process need (25% of its main thread's
        # samples, session15-3).
        now = time.monotonic()
        if (not force and now < self._alive_checked_at + ALIVE_CHECK_SECONDS
                and not self._ended - self.retired):
            return
        self._alive_checked_at = now
        for i, p in enumerate(self.procs):
            if i in self.retired:
                continue
            killed_here = False
            if i in self._ended and p.is_alive():
                p.join(WORKER_JOIN_SECONDS)  # its queue ended: it is exiting, or must go
                if p.is_alive():
                    p.kill()
                    p.join(WORKER_JOIN_SECONDS)
                    killed_here = True
            if not p.is_alive():
                code = p.exitcode
                how = f"was killed by signal {-code}" if code and code < 0 else f"exited with code {code}"
                if killed_here:
                    raise WorkerDied(f"loader worker {p.name} (pid {p.pid}) stopped sending: its "
                                     "result queue broke off mid-message, and it was killed", worker=i)
                raise WorkerDied(
                    f"loader worker {p.name} (pid {p.pid}) {how}; it may have run out of memory "
                    "or crashed inside FFmpeg", worker=i,
                )

    def _undelivered(self, messages: list) -> None:
        """What the workers sent that nobody will read, at shutdown (a pool whose messages
        hold resources releases them here)."""

    def retire(self, worker: int) -> None:
        """Carry on without dead worker ``worker``: :meth:`get` no longer raises for it. The
        process is killed and joined too: "dead" can also mean its status pipe broke (the
        fork server died) while it still runs, and it must not write into slots any more.
        What it sent before is still read (:meth:`drain_ready`)."""
        self.retired.add(worker)
        proc = self.procs[worker]
        with contextlib.suppress(Exception):
            proc.kill()
            proc.join(WORKER_JOIN_SECONDS)

    def drain_ready(self) -> list:
        """Every message already in the result queues, without blocking (after a worker died:
        what it sent before dying)."""
        out = []
        while (msg := self.poll()) is not None:
            out.append(msg)
        return out

    def shutdown(self) -> None:
        """Stop every worker: ask, wait, then terminate; close the queues. Idempotent."""
        if self._closed:
            return
        self._closed = True
        for q, p in zip(self.task_qs, self.procs):
            if p.is_alive():
                # A closed or broken queue: terminate() below handles that worker.
                with contextlib.suppress(Exception):
                    q.put(STOP)
        for q in self.result_qs:  # closed already, unless the workers failed to start
            with contextlib.suppress(Exception):
                q._writer.close()
        undelivered = self._read_while_workers_exit(time.monotonic() + WORKER_JOIN_SECONDS)
        for p in self.procs:
            if p.is_alive():
                p.terminate()
                p.join(1.0)
            if p.is_alive():
                p.kill()
                p.join(1.0)
        with contextlib.suppress(Exception):  # every writer is gone: EOF ends any read
            undelivered += self.drain_ready()
        with contextlib.suppress(Exception):
            self._undelivered(undelivered)
        for q in [*self.task_qs, *self.result_qs]:
            q.cancel_join_thread()
            q.close()
        for q in self.result_qs:  # Queue.close leaves the reader open where nothing was put
            with contextlib.suppress(Exception):
                q._reader.close()

    def _read_while_workers_exit(self, deadline: float) -> list:
        """Wait until every worker has exited or ``deadline``, reading what they still send.

        A worker cannot exit while its queue's feeder thread is still writing results into a
        full pipe: unread, a worker busy with large results (demuxed packets) was terminated
        mid-message instead of finishing, and what it had sent leaked. The messages read are
        returned (for :meth:`_undelivered`)."""
        out: list = []
        sentinels = {p.sentinel: p for p in self.procs if p.pid is not None}
        while sentinels and (left := deadline - time.monotonic()) > 0:
            readers = list(self._open_readers())
            ready = _wait([*readers, *sentinels], left)
            for s in ready:
                sentinels.pop(s, None)
            if any(r in ready for r in readers):
                with contextlib.suppress(Exception):  # whole messages, or a queue's end
                    out += self.drain_ready()
        for p in self.procs:
            if p.pid is not None and not p.is_alive():
                p.join(0)  # reap
        return out


class ProcessPool(WorkerProcesses, BatchPool):
    """CPU decoding in worker processes that write into shared-memory staging slots.

    Slots are one anonymous shared file (:class:`~._shared_slots.SharedSlots`): torch
    tensors here, numpy arrays in the workers, which never import torch; no named segment,
    so nothing outlives the processes.
    """

    def __init__(self, config: LoaderConfig, num_slots: int, *, nice: int = 0,
                 cpus: tuple[int, ...] | None = None) -> None:
        """``nice``: added to each worker's niceness (the combo runs its CPU side at a lower
        priority than the process feeding NVDEC); ``cpus``: the cores the workers may run on
        (``None``: anywhere)."""
        self._shared = SharedSlots(config.shapes, num_slots)
        self.slots = self._shared.tensors()
        self.index = config.index
        #: Per worker, the parts handed to it and not reported yet, oldest first: (plan,
        #: row_start) by (batch index, row start). A dict: a unit of the first batch cut into
        #: whole GOPs has a part per run of rows, up to one per row.
        self._held: list[dict] = [{} for _ in range(config.num_workers)]
        # Workers write CPU slots whatever the batches' device: theirs is not sent, so
        # unpickling the config loads no torch there.
        worker_config = dataclasses.replace(config, device=None)
        args = [CpuWorkerStart(i, worker_config, nice, cpus) for i in range(config.num_workers)]
        # The slots' descriptor goes with each fork request, not through the queues.
        super().__init__(worker_main, args, config.num_workers,
                         server=cpu_worker_server(config), inherited=self._shared)

    def get(self, deadline: float | None = None):
        try:
            return self._forget(super().get(deadline))
        except WorkerDied as dead:
            raise WorkerDied(f"{dead}{self._in_progress(dead.worker)}", worker=dead.worker) from None

    def poll(self, timeout: float = 0.0):
        return self._forget(super().poll(timeout))

    def retire(self, worker: int) -> None:
        super().retire(worker)
        self._held[worker].clear()  # its parts are another executor's now

    def _forget(self, msg):
        """Drop a reported part from its worker's list (the list a death message names)."""
        if isinstance(msg, RowsFilled):
            key = (msg.batch_index, msg.row_start)
            for held in self._held:
                if held.pop(key, None) is not None:
                    return msg
        return msg

    def _in_progress(self, worker: int) -> str:
        """What a dead worker was filling: the oldest batch it owed, and that part's files."""
        if not self._held[worker]:
            return ""
        plan, row_start = next(iter(self._held[worker].values()))
        videos = list(dict.fromkeys(int(v) for v in plan.video_indices))
        files = ", ".join(self.index[v].path for v in videos[:3])
        more = f" and {len(videos) - 3} more" if len(videos) > 3 else ""
        return (f", while filling batch {plan.batch_index} (rows {row_start}-"
                f"{row_start + plan.batch_size - 1}, from {files}{more})")

    @property
    def ways(self) -> int:
        return self.num_workers

    @property
    def splits_blocks(self) -> bool:
        return True  # each worker decodes its own share of a block's videos

    def submit(self, worker: int, task: FillTask) -> None:
        self._held[worker].update(((p.batch_index, a), (p, a)) for p, a in zip(task.plans, task.row_starts))
        self.put(worker, task)

    def shutdown(self) -> None:
        super().shutdown()
        self.slots = []
        self._shared.close()


#: Seconds a unit of the combo's NVDEC side waits for a free GPU staging buffer, with nothing
#: decoding, before one is made beyond the count anyway (see :meth:`SeparationPool._reserve`:
#: a last resort against a hang the rules there do not foresee; far above a CPU unit's time).
STAGING_WAIT_SECONDS = 5.0

#: GOPs per demux part: a unit with more GOPs is demuxed by several workers, in slices of
#: about this many GOPs (a part costs a message and a re-plan of the unit in its worker).
DEMUX_GOPS_PER_PART = 64


def demux_spans(tasks: list, num_workers: int) -> list[tuple[int, int]]:
    """Cut a unit's tasks into at most ``num_workers`` contiguous ``(start, stop)`` slices of
    about equal GOP counts, none much under :data:`DEMUX_GOPS_PER_PART` GOPs."""
    gops = np.cumsum([len(t.gops) for t in tasks])
    total = int(gops[-1]) if len(gops) else 0
    n = max(1, min(num_workers, total // DEMUX_GOPS_PER_PART))
    cuts = np.searchsorted(gops, total * np.arange(1, n) / n, side="left") + 1
    bounds = sorted({0, len(tasks), *cuts.tolist()})
    return [(a, b) for a, b in zip(bounds[:-1], bounds[1:]) if b > a] or [(0, len(tasks))]


class DemuxAhead:
    """Which units' demux tasks go to the workers now, so that the packets demuxed ahead of
    NVDEC stay within ``limit`` bytes (``None``: no limit, every unit goes at once).

    A unit is *ahead* from when its tasks are sent until it starts decoding, and counts as its
    estimate (:func:`estimate_packet_bytes`: the index's bytes per frame times the frames its
    GOPs demux) scaled by what the last :data:`MEAN_OF` units weighed against theirs (keyframes
    weigh more than the mean frame), until all its parts are here; then as their bytes. Units
    are held in submission order, and the next one is sent while nothing is ahead or while it
    fits beside those ahead. A unit submitted ``first`` (the combo handing NVDEC the oldest
    batch) goes at once. Units start in submission order, so the oldest unit not started is
    always ahead or the next to go: holding never stalls it.
    """

    #: Units whose bytes against their estimates scale the next estimates.
    MEAN_OF = 16

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self._held: collections.deque = collections.deque()  # (key, estimate, [(worker, task)])
        self._ahead: dict[int, list] = {}  # key -> [estimate, bytes received, parts left]
        self._history: collections.deque = collections.deque(maxlen=self.MEAN_OF)
        self._first = False
        #: Most bytes ahead at once, as counted when a unit was sent.
        self.peak_bytes = 0

    def hold(self, key: int, tasks: list, estimate: float, *, first: bool = False) -> None:
        """Queue unit ``key``'s demux tasks (``(worker, DemuxTask)`` pairs) and its estimated
        packet bytes; ``first`` puts it before the held ones, and the next :meth:`release`
        sends it whatever the bytes."""
        item = (key, float(estimate), tasks)
        if first:
            self._held.appendleft(item)
            self._first = True
        else:
            self._held.append(item)

    def release(self) -> list:
        """The ``(worker, task)`` pairs to send now."""
        out = []
        while self._held and (self._first or self._fits(self._held[0][1])):
            self._first = False
            key, estimate, tasks = self._held.popleft()
            self._ahead[key] = [estimate, 0, len(tasks)]
            self.peak_bytes = max(self.peak_bytes, int(self.bytes_ahead()))
            out += tasks
        return out

    def _fits(self, estimate: float) -> bool:
        if self.limit is None or not self._ahead:
            return True
        return self.bytes_ahead() + estimate * self._scale() <= self.limit

    def _scale(self) -> float:
        """Bytes received per byte estimated, over the last units (1 before any)."""
        estimated = sum(e for e, _ in self._history)
        return sum(b for _, b in self._history) / estimated if estimated > 0 else 1.0

    def bytes_ahead(self) -> float:
        """The units ahead: their bytes where all parts are here, else their scaled estimate
        (or the bytes received so far, if more)."""
        scale = self._scale()
        return sum(got if left == 0 else max(got, estimate * scale)
                   for estimate, got, left in self._ahead.values())

    def received(self, key: int, nbytes: int) -> None:
        """A part of unit ``key`` arrived with ``nbytes`` of packets."""
        unit = self._ahead.get(key)
        if unit is None:
            return
        unit[1] += nbytes
        unit[2] -= 1
        if unit[2] == 0 and unit[0] > 0 and unit[1] > 0:  # a unit left to the CPU says nothing
            self._history.append((unit[0], unit[1]))

    def started(self, key: int) -> None:
        """Unit ``key`` started decoding (or failed): no longer ahead."""
        self._ahead.pop(key, None)

    def __len__(self) -> int:
        """Units ahead."""
        return len(self._ahead)


def estimate_packet_bytes(decode_tasks, cpu_only=None) -> float:
    """Packet bytes the demux of ``decode_tasks`` yields, from the index alone: each video's
    mean bytes per frame (file size over frames) times the frames from each GOP's keyframe
    to its last wanted one. Videos marked in ``cpu_only`` (decoded on the CPU: the workers
    demux nothing of them) count 0."""
    total = 0.0
    for task in decode_tasks:
        if cpu_only is not None and cpu_only[task.video_index]:
            continue
        record = task.record
        per_frame = record.size_bytes / max(1, record.num_frames)
        total += per_frame * sum(g.last - g.keyframe + 1 for g in task.gops)
    return total


#: Whether a unit filling part of one batch counts as that part against ``units_decoding``
#: (see :class:`SeparationPool`); False counts every unit whole, as before session 11 (kept
#: for A/B runs of the start-up, ``benchmarks/startup.py --patch``).
PARTS_COUNT_AS_ROWS = True


class SeparationPool(WorkerProcesses, BatchPool):
    """NVIDIA's separation mode: CPU workers demux GOPs to Annex-B packet bundles; this
    process decodes them on the GPU (NVDEC) into GPU staging slots. Workers never touch CUDA.

    Decoding is asynchronous (``submit_batch``): units are queued on the decoder threads in
    the order they were submitted, as soon as their packets are here, and up to
    ``units_decoding`` units (the config's; 4 by default) are queued before the oldest is
    waited for, so the decoders never drain between units. A unit of part of one batch counts
    as that part (:meth:`_weight`): the first batch is cut into a unit per demux worker (the
    start-up ramp, :func:`~._units.whole_batch_units`), and counted whole, 16 of them decoded
    8 at a time, the decoders half idle (``session11-2``: 40% of their samples idle while the
    first batch was made).

    Units start in submission order, not in the order their packets arrive: the loader takes
    batches in order, so a unit decoded ahead of an older one would sit in its slots while the
    older one waits behind it. Started in arrival order (as before), 16 workers finishing
    their demux together made the loader stall until every unit was decoded, then deliver
    them in one burst while the decoders idled (seen on the H200: 18 s stalls).
    """

    def __init__(self, config: LoaderConfig, assembler: BatchAssembler, num_slots: int, *,
                 device=None, num_buffers: int | None = None, counters: dict | None = None) -> None:
        """``num_slots``: the scheduler's staging slots; ``num_buffers``: GPU buffers behind
        them (default one per slot; see :class:`StagingBuffers`); ``device``: where the
        buffers live (default the config's GPU; tests pass ``"cpu"``); ``counters``: the
        buffers' counters (:class:`StagingBuffers`)."""
        self.assembler, self.index = assembler, config.index
        try:
            self.slots = StagingBuffers(config.shapes, num_slots, num_buffers or num_slots,
                                        device=config.gpu if device is None else device,
                                        counters=counters)
        except BaseException:  # no pool to shut down: close the executors here
            assembler.close()
            raise
        self._stuck_since: float | None = None  # see _reserve
        self.units_decoding = config.units_decoding
        self._units: dict[int, tuple] = {}  # key -> its FillTask and decode tasks
        self._keys = itertools.count()  # unit keys (a batch can begin two units)
        self._parts: dict[int, list] = {}  # unit key -> each part's (bundles, failed) or None
        self._order: collections.deque = collections.deque()  # keys not started, as submitted
        self._ready: dict[int, tuple[list, list]] = {}  # key -> its packets, all parts here
        self._decoding: collections.deque = collections.deque()  # UnitMessages in flight
        self._weights: collections.deque = collections.deque()  # their rows, as counted
        self._batch_rows = config.batch_size * config.rows_per_sample
        self._done: collections.deque = collections.deque()
        self.demux_ahead = DemuxAhead(config.demux_ahead_bytes)
        self.cpu_only = config.cpu_only  # videos the workers leave to the CPU: no packets
        self._segment_prefix = segment_prefix()
        falls_back = assembler.fallback is not None  # the loader's process retries on the CPU
        args = [DemuxWorkerStart(i, config.index, config.skips_bad_files, config.cpu_only, config.nvtx,
                                 falls_back, self._segment_prefix)
                for i in range(config.num_workers)]
        # The demux server: workers without torch (~190 MiB of RSS each saved).
        super().__init__(demux_worker_main, args, config.num_workers, server="demux")

    @property
    def ways(self) -> int:
        return self.num_workers

    def submit(self, worker: int, task: FillTask, *, first: bool = False) -> None:
        """Hand a unit's demuxing to the workers: to ``worker`` alone, or, for a unit of more
        than :data:`DEMUX_GOPS_PER_PART` GOPs (a GopShuffle block), in slices of its tasks to
        several workers, so one worker's demux speed does not bound a large unit. With
        ``first``, the unit starts decoding before every unit not started yet (the combo's
        NVDEC taking over the CPU unit that holds the oldest batch, which the units queued
        here wait behind)."""
        key = next(self._keys)
        decode_tasks = plan_tasks(task.plans, self.index)
        spans = demux_spans(decode_tasks, self.num_workers)
        self._units[key] = (task, decode_tasks)  # planned once, reused to decode
        self._parts[key] = [None] * len(spans)
        if first:
            self._order.appendleft(key)
        else:
            self._order.append(key)
        demux = [((worker + part) % self.num_workers, DemuxTask(key, task.plans, part, start, stop))
                 for part, (start, stop) in enumerate(spans)]
        self.demux_ahead.hold(key, demux, estimate_packet_bytes(decode_tasks, self.cpu_only),
                              first=first)
        self._send_demux()

    def _send_demux(self) -> None:
        """Send the held units' demux tasks that :class:`DemuxAhead` lets go now."""
        for worker, message in self.demux_ahead.release():
            self.put(worker, message)

    def get(self, deadline: float | None = None):
        while not self._done:
            error = self._start_units(deadline)
            if error is not None:
                return error
            if self._decoding:  # the next units decode while the oldest is waited for
                self._done.extend(self._pop_decoding().finish())
        return self._done.popleft()

    def poll_filled(self):
        """:meth:`get` without waiting: take the packets that are here, start what can start,
        and return the oldest unit's next message if that unit has finished decoding, else
        ``None``. (The combo waits on its CPU workers and NVDEC at once with this.)"""
        if not self._done:
            error = self._start_units(None, block=False)
            if error is not None:
                return error
            if self._decoding and self._decoding[0].ready:
                self._done.extend(self._pop_decoding().finish())
        return self._done.popleft() if self._done else None

    def _start_units(self, deadline, *, block: bool = True):
        """Start the oldest submitted units whose packets are here, up to the limit; wait for
        packets only when nothing is decoding (and ``block``). Returns a worker's error
        message, if one came."""
        while sum(self._weights) < self.units_decoding * self._batch_rows:
            if self._order and self._order[0] in self._ready:
                if not self._reserve(self._order[0], block=block):
                    return None  # no GPU buffer free: delivered batches will free some
                key = self._order.popleft()
                self._weights.append(self._weight(self._units[key][0]))
                self._start(key, *self._ready.pop(key))
                continue
            msg = self._next_message(deadline, block=block and not self._decoding)
            if msg is None:
                return None
            if not isinstance(msg, PacketsDemuxed):
                return self._with_batch_index(msg)
            self._receive(msg)
        return None

    def _reserve(self, key: int, *, block: bool) -> bool:
        """Bind GPU buffers to the slots of unit ``key`` before it starts decoding, or say it
        must wait for delivered batches to free some (``False``).

        With NVDEC alone it never waits for long: units start in order, a new one only once
        the messages of the finished ones were taken (so their batches were delivered and
        released), so the slots bound are those of the units decoding (fewer than
        ``units_decoding``, at most ``lookahead`` batches each) and a batch shared with this
        unit. (Overlapping units, GOPs of streams, may wait for the oldest unit decoding to
        finish: the buffers, ``stride × units_decoding + lookahead - stride``, hold this unit
        and those decoding once the batches before this unit's first are delivered.) In the combo NVDEC may finish units whose batches wait for the CPU rows of an
        earlier batch; this unit then waits for those deliveries, unless they cannot come
        first: a unit not started yet (this one, or one queued behind it, as a dead CPU
        worker's units are) holds rows of a batch no later than every bound one. Then, or
        when the caller blocks on this pool with nothing decoding, or after
        :data:`STAGING_WAIT_SECONDS` with nothing decoding (a last resort against a hang), an
        extra buffer is made (:class:`StagingBuffers`)."""
        task = self._units[key][0]
        batches = [p.batch_index for p in task.plans]
        staging = self.slots
        if staging.can_bind(task.slot_ids):
            staging.bind(task.slot_ids, batches)
            self._stuck_since = None
            return True
        now = time.monotonic()
        if self._stuck_since is None:
            self._stuck_since = now
        oldest = staging.oldest_batch()
        blocked = oldest is not None and any(self.first_batch(k) <= oldest for k in self._order)
        idle = not self._decoding and (block or now - self._stuck_since >= STAGING_WAIT_SECONDS)
        if not (blocked or idle):
            return False
        staging.bind(task.slot_ids, batches, extra=True)
        self._stuck_since = None
        return True

    def first_batch(self, key: int) -> int:
        """The lowest batch unit ``key`` fills rows of."""
        return min(p.batch_index for p in self._units[key][0].plans)

    def release(self, slot_id: int) -> None:
        self.slots.release(slot_id)

    def _with_batch_index(self, msg):
        """A demux worker's failure names its unit's key: name the unit's first batch too."""
        if isinstance(msg, Failure) and msg.unit_key is not None:
            self.demux_ahead.started(msg.unit_key)  # it will not start: no longer ahead
            self._send_demux()
        unit = self._units.get(msg.unit_key) if isinstance(msg, Failure) else None
        if unit is None:
            return msg
        return dataclasses.replace(msg, batch_index=unit[0].first_batch, slot_ids=unit[0].slot_ids)

    def _next_message(self, deadline, *, block: bool):
        return super().get(deadline) if block else self.poll()

    def _receive(self, msg: PacketsDemuxed) -> None:
        """Keep a part of a unit's packets; the unit is ready once all its parts are here."""
        key = msg.key
        bundles = unpack_payloads(msg.light, msg.segment)  # maps the segment, unlinks its name
        self.demux_ahead.received(key, msg.segment.size if msg.segment is not None else 0)
        self._send_demux()  # bytes under the estimate make room for more
        parts = self._parts[key]
        parts[msg.part] = (bundles, msg.failed)
        if any(p is None for p in parts):
            return
        del self._parts[key]
        self._ready[key] = ([b for p in parts for b in p[0]], [f for p in parts for f in p[1]])

    def _start(self, key: int, bundles: list, failed: list) -> None:
        self.demux_ahead.started(key)
        self._send_demux()
        task, decode_tasks = self._units.pop(key)
        self._decoding.append(start_unit_messages(
            self.assembler, self.slots, task, bundles, failed, decode_tasks=decode_tasks,
        ))

    def _weight(self, task: FillTask) -> int:
        """The rows a unit counts for against ``units_decoding`` batches: its own if it
        fills part of one batch, else a whole batch (a unit of several batches is one unit:
        GPU buffers are bound ``lookahead`` batches per unit, :mod:`._memory`)."""
        rows = sum(p.batch_size for p in task.plans)
        one_batch = len({p.batch_index for p in task.plans}) == 1
        if one_batch and PARTS_COUNT_AS_ROWS:
            return min(rows, self._batch_rows)
        return self._batch_rows

    def _pop_decoding(self):
        self._weights.popleft()
        return self._decoding.popleft()

    def _undelivered(self, messages: list) -> None:
        for msg in messages:  # their segments were never mapped: unlink the names
            if isinstance(msg, PacketsDemuxed):
                discard(msg.segment)

    def shutdown(self) -> None:
        while self._decoding:
            self._pop_decoding().cancel()
        super().shutdown()
        # The workers are gone: a segment of a part one of them was writing when it was
        # stopped is still named (the resource tracker would remove it only at exit).
        discard_prefixed(self._segment_prefix)
        self.assembler.close()
        self.slots = []
        self._parts, self._ready = {}, {}  # received packets: their mappings go with them
