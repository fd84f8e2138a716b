"""Pools that fill image slots (:class:`~._contract.BatchPool`): Pillow in spawned workers or
in this process, and nvImageCodec on the GPU (:class:`~._image_decode.BatchDecodePool`, in
its own module); and :class:`MemoryImages`, an in-memory dataset on the batch's device, which
needs no slots."""

from __future__ import annotations

import collections

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
from ._messages import FillTask
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


class MemoryImages:
    """An in-memory dataset (CIFAR) on the batch's device: its pixels are moved there once,
    and each unit of consecutive batches is gathered, augmented and finished there in one
    pass (:func:`~._image_fill.augment_from_memory`).

    Not a :class:`~._contract.BatchPool`: nothing here can fail per file, wait on a worker or
    arrive out of order, so :class:`~._image_loader.ImageLoader` drives it without the
    scheduler, slots or messages, whose per-batch bookkeeping (~0.1-0.3 ms) was most of a
    GPU epoch once the pixels no longer crossed PCIe.
    """

    executor = "memory"

    def __init__(self, config) -> None:
        device = config.device if config.device is not None else torch.device("cpu")
        self.config = config
        self.pixels = config.dataset.pixels_on(device)  # copied once, kept by the dataset

    def augment(self, plans: list) -> torch.Tensor:
        """The finished samples of ``plans``, in order (a freshly allocated tensor)."""
        return augment_from_memory(self.pixels, self.config, plans)

    def shutdown(self) -> None:
        self.pixels = None


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
        super().__init__(image_worker_main, args, config.num_workers, server="torch")

    @property
    def ways(self) -> int:
        return self.num_workers

    def submit(self, worker: int, task: FillTask) -> None:
        self.put(worker, task)

    def shutdown(self) -> None:
        super().shutdown()
        self.slots = []

