"""What the scheduler needs of a pool of executors: the whole contract, declared.

The scheduler (:mod:`._scheduler`) knows no backend. It hands units of work to a
:class:`BatchPool` and takes back one message per batch part; a pool owns its staging slots,
its executors and its processes or threads, and says how it wants block units handed out.
Adding a backend means adding a pool (and an executor folder under ``decoding/``), not
touching the scheduler.
"""

from __future__ import annotations

import abc

from ._messages import Failure, FillTask, RowsFilled


class BatchPool(abc.ABC):
    """Fills staging slots from units of work.

    Attributes:
        slots: the staging slots, ``slots[i][output_name]`` a uint8 tensor
            ``(rows, T, H, W, 3)``; a unit's :class:`FillTask` names the slots it fills.
    """

    slots: list[dict]

    @property
    @abc.abstractmethod
    def ways(self) -> int:
        """How many executors decode at once: a block unit is cut by video into up to this
        many units when :attr:`splits_blocks` (CPU workers), and work is dealt round-robin
        over them."""

    @property
    def splits_blocks(self) -> bool:
        """Whether a GOP-local block should be cut by video over :attr:`ways` executors
        (True for processes that each decode a share; False when one executor overlaps a
        block's GOPs itself, as NVDEC's decoder threads do)."""
        return False

    @property
    def rows_per_unit(self) -> int | None:
        """With whole-batch plans (not GOP blocks): hand each batch out as units of at most
        this many rows (``None``: whole batches). A pool whose executors differ much in
        latency (the combo: a CPU worker takes seconds for what NVDEC does in a fraction)
        wants small units, so that batches taken in order never wait long on a slow one."""
        return None

    def staged(self, slot_id: int, executor: str) -> dict:
        """The buffers of slot ``slot_id`` that ``executor`` filled (a pool whose executors
        write to different memories, CPU and GPU, keeps a buffer set for each)."""
        return self.slots[slot_id]

    def release(self, slot_id: int) -> None:
        """The scheduler delivered the batch in slot ``slot_id`` (or dropped it after a
        ``break``): no unit fills it until the scheduler hands it out again. A pool whose
        slots share fewer buffers (:class:`~._pool.StagingBuffers`) frees the slot's here."""

    @abc.abstractmethod
    def submit(self, worker: int, task: FillTask) -> None:
        """Start filling ``task``'s rows; ``worker`` in ``range(ways)`` picks the executor."""

    @abc.abstractmethod
    def get(self) -> RowsFilled | Failure:
        """The next finished part (blocking); never hangs on a dead worker (raises
        :class:`~vidloader.errors.WorkerError`)."""

    @abc.abstractmethod
    def shutdown(self) -> None:
        """Stop everything, join every process and thread, free the slots. Idempotent."""
