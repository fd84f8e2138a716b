"""Pools that fill image slots (:class:`~._contract.BatchPool`): in memory on the batch's
device, Pillow in spawned workers or in this process, and nvImageCodec on the GPU."""

from __future__ import annotations

import collections

import torch

from ._contract import BatchPool
from ._image_fill import (
    ImageWorkerStart,
    file_filler,
    fill_from_memory,
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


class MemoryPool(_SyncPool):
    """An in-memory dataset (CIFAR): its pixels are moved to the batch's device once; each
    batch is gathered and augmented there, in one batched call."""

    executor = "memory"

    def __init__(self, config, num_slots: int) -> None:
        device = config.device if config.device is not None else torch.device("cpu")
        self.pixels = config.dataset.pixels_on(device)  # copied once, kept by the dataset

        def fill(plan, staging):
            fill_from_memory(self.pixels, config, plan, staging)
            return _all_valid(plan), []
        super().__init__(fill, allocate_image_slots(config, num_slots, device=device))


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


class BatchDecodePool(BatchPool):
    """Files decoded a batch at a time on the GPU by nvImageCodec in this process, read by a
    few threads; crops and resizes run on the GPU, into GPU slots.

    ``submit`` only starts reading the unit's files on the reader threads; ``get`` decodes
    the oldest unit once its files are in. The files of the next units are read while a
    unit decodes (the scheduler submits up to ``prefetch`` units ahead).

    ``decoder`` stands in for nvImageCodec (anything with ``name`` and
    ``decode(list[bytes | None]) -> list[Tensor | None]``).
    """

    def __init__(self, config, num_slots: int, decoder=None) -> None:
        from concurrent.futures import ThreadPoolExecutor

        from ..images._nvimgcodec import NvImageCodecDecoder

        device = config.device if config.device is not None else torch.device("cpu")
        self.config = config
        self.decoder = decoder if decoder is not None else NvImageCodecDecoder(device)
        self.reader = ThreadPoolExecutor(config.reader_threads, thread_name_prefix="vidloader-read")
        self.slots = allocate_image_slots(config, num_slots, device=device)
        self._pending: collections.deque = collections.deque()  # (task, per-plan futures)
        self._done: collections.deque = collections.deque()

    @property
    def ways(self) -> int:
        return 1

    def submit(self, worker: int, task: FillTask) -> None:
        from ._image_fill import read_file

        dataset = self.config.dataset
        reads = [[self.reader.submit(read_file, dataset.path(i)) for i in plan.video_indices.tolist()]
                 for plan in task.plans]
        self._pending.append((task, reads))

    def get(self):
        from ._image_fill import fill_from_blobs

        while not self._done:
            task, reads = self._pending.popleft()
            blobs = iter(reads)

            def fill(plan, staging, blobs=blobs):
                return fill_from_blobs(self.config, self.decoder,
                                       [f.result() for f in next(blobs)], plan, staging)
            self._done.extend(fill_task_messages(fill, self.slots, task, self.decoder.name))
        return self._done.popleft()

    def shutdown(self) -> None:
        self.reader.shutdown(wait=True, cancel_futures=True)
        self._pending.clear()
        self.slots = []
