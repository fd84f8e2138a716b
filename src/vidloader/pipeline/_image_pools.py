"""Pools that fill image slots (:class:`~._contract.BatchPool`): in memory on the batch's
device, Pillow in spawned workers or in this process, and nvImageCodec on the GPU
(:class:`~._image_decode.BatchDecodePool`, in its own module)."""

from __future__ import annotations

import collections
import traceback

import numpy as np
import torch

from ._contract import BatchPool
from ._image_decode import BatchDecodePool  # noqa: F401 - the GPU pool, re-exported
from ._image_fill import (
    ImageWorkerStart,
    augment_from_memory,
    file_filler,
    fill_task_messages,
    image_worker_main,
)
from ._messages import Failure, FillTask, RowsFilled
from ._pool import WorkerProcesses


def allocate_image_slots(config, num_slots: int, *, device=None, shared=False) -> list:
    """``num_slots`` dicts ``{"images": uint8 [B, 1, oh, ow, 3]}`` (the time axis of video
    staging, of length 1, so ``processing.finalize`` applies unchanged)."""
    shape = (config.batch_size, 1, *config.out_hw, 3)
    slots = []
    for _ in range(num_slots):
        images = torch.zeros(shape, dtype=torch.uint8, device=device)
        slots.append({"images": images.share_memory_() if shared else images})
    return slots


class _SyncPool(BatchPool):
    """Fills each unit inside ``submit``, in this process (``ways`` is 1)."""

    executor = ""

    def __init__(self, fill, slots: list) -> None:
        self.fill, self.slots = fill, slots
        self._done: collections.deque = collections.deque()

    @property
    def ways(self) -> int:
        return 1

    def submit(self, worker: int, task: FillTask) -> None:
        self._done.extend(fill_task_messages(self.fill, self.slots, task, self.executor))

    def get(self):
        return self._done.popleft()

    def shutdown(self) -> None:
        self.slots = []


class MemoryPool(BatchPool):
    """An in-memory dataset (CIFAR): its pixels are moved to the batch's device once; each
    unit of consecutive batches is gathered, augmented and finished there in one pass
    (:func:`~._image_fill.augment_from_memory`), and each batch handed over as a view of the
    result: no staging copy, no per-batch launches beyond the loader's own.

    Its slots hold no memory of their own: ``slots[i]["images"]`` is the finished batch until
    the collector :meth:`take` s it (:attr:`hands_over`), and each unit's result is freshly
    allocated (from the caching allocator on a GPU), so handing views to the user is safe.
    """

    executor = "memory"
    #: Slots hold the finished output, dtype, normalisation and layout (the collector skips
    #: ``finalize``) ...
    stages_final = True
    #: ... and the collector takes it as is instead of copying it out of the slot.
    hands_over = True

    def __init__(self, config, num_slots: int) -> None:
        device = config.device if config.device is not None else torch.device("cpu")
        self.config = config
        self.pixels = config.dataset.pixels_on(device)  # copied once, kept by the dataset
        self.slots = [{"images": None} for _ in range(num_slots)]
        self._done: collections.deque = collections.deque()

    @property
    def ways(self) -> int:
        return 1

    def submit(self, worker: int, task: FillTask) -> None:
        try:
            self._fill(task)
        except BaseException as exc:  # the scheduler raises it as a WorkerError
            self._done.append(Failure(task.first_batch, task.slot_ids, repr(exc),
                                      traceback.format_exc(), getattr(exc, "path", None)))

    def _fill(self, task: FillTask) -> None:
        if any(start != 0 for start in task.row_starts):  # whole batches only (no row units)
            raise RuntimeError(f"MemoryPool fills whole batches, got row starts {task.row_starts}")
        images = augment_from_memory(self.pixels, self.config, task.plans)
        offset = 0
        for slot_id, plan in zip(task.slot_ids, task.plans):
            rows = plan.batch_size
            self.slots[slot_id]["images"] = images[offset:offset + rows]
            offset += rows
            valid = np.ones(rows, dtype=bool)
            self._done.append(RowsFilled(plan.batch_index, slot_id, valid, [], {"decoded": rows},
                                         0, self.executor, {}, task.unit))

    def take(self, slot_id: int) -> torch.Tensor:
        """The finished batch in ``slot_id``, now the caller's (the slot lets go of it)."""
        images, self.slots[slot_id]["images"] = self.slots[slot_id]["images"], None
        return images

    def get(self):
        return self._done.popleft()

    def shutdown(self) -> None:
        self.slots = []
        self._done.clear()


class PillowInlinePool(_SyncPool):
    """Pillow decoding in the calling process (``num_workers=0``)."""

    executor = "pillow"

    def __init__(self, config, num_slots: int) -> None:
        super().__init__(file_filler(config), allocate_image_slots(config, num_slots))


class PillowProcessPool(WorkerProcesses, BatchPool):
    """Pillow decoding in ``num_workers`` spawned processes writing into shared slots."""

    def __init__(self, config, num_slots: int) -> None:
        self.slots = allocate_image_slots(config, num_slots, shared=True)
        args = [ImageWorkerStart(i, config, self.slots) for i in range(config.num_workers)]
        super().__init__(image_worker_main, args, config.num_workers)

    @property
    def ways(self) -> int:
        return self.num_workers

    def submit(self, worker: int, task: FillTask) -> None:
        self.put(worker, task)

    def shutdown(self) -> None:
        super().shutdown()
        self.slots = []


def _all_valid(plan):
    import numpy as np

    return np.ones(plan.batch_size, dtype=bool)
