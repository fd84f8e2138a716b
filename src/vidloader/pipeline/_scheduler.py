"""The scheduler: hands an epoch's units of work to a pool and yields batches in order.

It knows no backend: it sees a :class:`~._contract.BatchPool` (slots, ``submit``, ``get``)
and an epoch plan. Its state is the staging slots' free-list, the batches dispatched but not
yet yielded (:class:`OpenBatch`), and the messages still owed by the pool.

Flow control: a unit is handed out only when every batch it touches has a slot, so the slots
bound the work in flight; batches are yielded strictly in order, so the stream is the same
whatever the number or speed of the executors. A slot goes back to the pool
(:meth:`~._contract.BatchPool.release`) when its batch was delivered, or, after a ``break``,
as soon as no unit fills it any more: a pool with fewer GPU buffers than slots reuses them.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Iterator

import numpy as np

from ..errors import WorkerError
from ._contract import BatchPool
from ._messages import Failure, FillTask, RowsFilled
from ._units import (
    Part,
    block_units,
    first_batch_shares,
    has_row_affinity,
    row_units,
    split_by_video,
    whole_batch_units,
)


@dataclasses.dataclass
class FinishedBatch:
    """A batch whose rows are all in its slot: the plan (with labels), the slot, which rows
    are valid, the failed files, the summed decode counters and the rows each executor
    filled."""

    plan: object  # BatchPlan
    slot_id: int
    valid: np.ndarray
    errors: list
    stats: dict | None
    segments: list[tuple[int, int, str]]  # (row_start, row_stop, executor), in row order
    fallbacks: dict[str, str]  # files decoded on the CPU instead of NVDEC: path -> why

    @property
    def executors(self) -> set[str]:
        return {name for _, _, name in self.segments}

    @property
    def rows_by_executor(self) -> dict[str, int]:
        rows: dict[str, int] = {}
        for a, z, name in self.segments:
            rows[name] = rows.get(name, 0) + z - a
        return rows


class OpenBatch:
    """A dispatched batch: its slot and plan, and the row ranges reported so far (a batch
    can be filled by several units, each reporting its rows)."""

    def __init__(self, slot: int, plan) -> None:
        self.slot, self.plan = slot, plan
        self.valid = np.zeros(plan.batch_size, dtype=bool)
        self.errors: list = []
        self.stats: dict | None = None
        self.segments: list[tuple[int, int, str]] = []
        self.fallbacks: dict[str, str] = {}
        self.rows_expected = self.rows_received = 0

    def expect(self, start: int, stop: int) -> None:
        self.rows_expected += stop - start

    @property
    def complete(self) -> bool:
        return self.rows_expected == self.plan.batch_size and self.rows_received == self.rows_expected

    def receive(self, msg: RowsFilled) -> None:
        n = len(msg.valid)
        self.valid[msg.row_start:msg.row_start + n] = msg.valid
        self.rows_received += n
        self.errors.extend(msg.errors)
        self.segments.append((msg.row_start, msg.row_start + n, msg.executor))
        self.fallbacks.update(msg.fallbacks)
        stats = msg.stats
        self.stats = dict(stats) if self.stats is None else {k: v + stats[k] for k, v in self.stats.items()}

    def finished(self) -> FinishedBatch:
        return FinishedBatch(self.plan, self.slot, self.valid, self.errors, self.stats,
                             sorted(self.segments), self.fallbacks)


class Scheduler:
    """Runs epochs on one pool; lives as long as the pool (persistent workers included).

    Args:
        pool: where units are filled.
        labels: one label per video (aligned with the index), or ``None``.
    """

    def __init__(self, pool: BatchPool, labels: np.ndarray | None = None) -> None:
        self.pool, self.labels = pool, labels
        self.outstanding = 0  # messages the pool still owes (one per part handed out)
        self.next_batch = 0  # the batch the consumer will get next
        self._next_worker = 0  # round-robin over the pool's executors, unit by unit
        self._held: set[int] = set()  # slots handed out and not released to the pool yet
        self._owed: collections.Counter = collections.Counter()  # slot -> parts not reported
        #: Whether an epoch ran on this pool: the start-up ramp is for cold workers only.
        self._warm = False

    def run(self, plan, start: int, *, lookahead: int, blocks: bool,
            units: Iterator[list[Part]] | None = None) -> Iterator[FinishedBatch]:
        """Batches ``start..len(plan)-1`` of ``plan`` in order. A finished batch's slot is
        reused as soon as the consumer asks for the next one: copy out of it before that.

        Args:
            lookahead: consecutive whole batches per unit, once ramped up (ignored with
                ``blocks`` and with a pool that wants row units,
                :attr:`~._contract.BatchPool.rows_per_unit`; see :func:`~._units.whole_batch_units`).
            blocks: hand out the plan's own GOP-local blocks (``plan.decode_units``).
            units: the units to hand out, made by the caller from batch ``start`` on (the
                GOPs of a plan of streams, :func:`~._units.stream_gop_units`), each to the
                next executor in turn; ``blocks`` and ``lookahead`` are then not used.
        """
        pool, n = self.pool, len(plan)
        self._release_held()  # an earlier run ended by drain() or an error: nothing in flight
        free = list(range(len(pool.slots)))[::-1]
        open_batches: dict[int, OpenBatch] = {}  # dispatched, not yet yielded
        if units is not None:
            blocks = False
        elif blocks:
            units = block_units(plan, start)
        elif pool.rows_per_unit:
            units = row_units(plan, start, pool.rows_per_unit)
        elif self._warm:
            # Persistent workers, a later epoch: whole units from the start. Re-ramping every
            # epoch cut GOP sharing (units of 1, 2 batches): 2.94 decoded frames per delivered
            # one against 1.46, half the throughput, on a 5-batch epoch (2 cores).
            units = whole_batch_units(start, n, lookahead, ramp=False)
        else:
            index = getattr(pool, "index", None)  # the pool's executors' videos, if it has one
            first = plan.batch(start) if start < n else None
            units = whole_batch_units(
                start, n, lookahead, ways=pool.ways, first_rows=first.batch_size if first else 0,
                first_shares=first_batch_shares(first, index, pool.ways) if first and index is not None else None)
        self._warm = True
        affine = blocks and has_row_affinity(plan)
        unit, self.outstanding = next(units, None), 0
        for b in range(start, n):
            # Hand out units while slots are free. A unit needs a slot for each batch it
            # touches that has none yet (a batch straddling two blocks shares its slot), counted
            # once however many parts of the unit are in it (a unit of GOPs of streams has a
            # part per run of rows: counted by part, it could never fit).
            while unit is not None and len(free) >= len({p.batch for p in unit} - open_batches.keys()):
                self._dispatch(plan, unit, open_batches, free,
                               split=blocks and pool.splits_blocks and not affine, affine=affine)
                unit = next(units, None)
            while not open_batches[b].complete:
                msg = pool.get()
                if isinstance(msg, Failure):
                    raise WorkerError(f"decoding batch {msg.batch_index} failed: {msg.message}",
                                      path=msg.path, remote_traceback=msg.traceback)
                self.outstanding -= 1
                self._owed[msg.slot_id] -= 1
                open_batches[msg.batch_index].receive(msg)
            done = open_batches.pop(b)
            self.next_batch = b + 1
            yield done.finished()
            free.append(done.slot)
            self._release(done.slot)

    def drain(self) -> None:
        """Receive and drop the messages still owed (after a ``break``), so the pool starts
        the next epoch clean."""
        # A slot nobody will read and no unit still fills goes back at once: its buffer may
        # serve the units still to drain (a pool with fewer buffers than slots would
        # otherwise make extra ones for them).
        for slot in [s for s in self._held if self._owed[s] <= 0]:
            self._release(slot)
        while self.outstanding > 0:
            msg = self.pool.get()
            self.outstanding -= 1
            if isinstance(msg, RowsFilled):
                self._owed[msg.slot_id] -= 1
                if self._owed[msg.slot_id] <= 0 and msg.slot_id in self._held:
                    self._release(msg.slot_id)
        self._release_held()

    def _release(self, slot: int) -> None:
        self._held.discard(slot)
        self.pool.release(slot)

    def _release_held(self) -> None:
        """Give the pool back the slots of batches dispatched but never yielded (their units
        are all reported: nothing writes into them any more)."""
        for slot in self._held:
            self.pool.release(slot)
        self._held.clear()
        self._owed.clear()

    def _dispatch(self, plan, unit: list[Part], open_batches: dict, free: list, *, split: bool,
                  affine: bool = False) -> None:
        """Send one unit: to one executor, or cut by video over all of them (they decode
        disjoint GOPs of the block into the same slots at once). With ``affine`` (a plan of
        streams), to the executor of the unit's first row, every time."""
        for part in unit:
            if part.batch not in open_batches:
                open_batches[part.batch] = OpenBatch(free.pop(), self._with_labels(plan.batch(part.batch)))
                self._held.add(open_batches[part.batch].slot)
        plans = {b: ob.plan for b, ob in open_batches.items()}
        pool = self.pool
        for share in split_by_video(unit, plans, pool.ways) if split else [unit]:
            slot_ids, sub_plans, row_starts = [], [], []
            for part in share:
                full = open_batches[part.batch]
                a, z = part.rows(full.plan.batch_size)
                full.expect(a, z)
                self._owed[full.slot] += 1
                slot_ids.append(full.slot)
                sub_plans.append(full.plan if (a, z) == (0, full.plan.batch_size) else full.plan.rows(a, z))
                row_starts.append(a)
            worker = share[0].row_start % pool.ways if affine else self._next_worker
            pool.submit(worker, FillTask(slot_ids, sub_plans, row_starts))
            self._next_worker = (self._next_worker + 1) % pool.ways
            self.outstanding += len(share)

    def _with_labels(self, bp):
        return bp if self.labels is None else bp.with_labels(self.labels[bp.video_indices])
