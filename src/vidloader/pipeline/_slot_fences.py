"""Fences between the loader's process and worker processes that write its GPU staging slots
(the GPU image workers, NVDEC worker processes): a slot may be written again only once its
last batch has been copied out, on whatever stream the loader is iterated.

One inter-process CUDA event per slot, made in the loader's process and sent to each worker
once, at its start (torch's reductions send its IPC handle). When a unit is handed out, the
event of each slot it fills is recorded on the consumer's current stream; a worker waits for
those events (on the GPU, or on the host) before it writes the slots. A slot is handed out
again only after its batch was delivered. Units that overlap (GOPs of streams) share a slot
that is still open: each ``submit`` records its event again, and a later record only makes
the next unit wait for a later point of the consumer's stream, never an earlier one.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from ._contract import BatchPool
from ._messages import FillTask
from ._pool import WorkerProcesses


class SlotFences:
    """Per slot, the inter-process event marking its last batch copied out (``events``, to
    give the workers; ``None`` each on the CPU, where there is no stream to fence)."""

    def __init__(self, count: int, device: torch.device) -> None:
        self.device = device
        if device.type != "cuda":
            self.events: list = [None] * count
            return
        self.events = [torch.cuda.Event(interprocess=True) for _ in range(count)]
        stream = torch.cuda.current_stream(device)
        for event in self.events:  # recorded once, so each exists before its handle is taken
            event.record(stream)

    def copied_out(self, slot_ids: Iterable[int]) -> None:
        """Record, on the consumer's current stream, that ``slot_ids``' last batches are
        copied out: call before handing out a unit that fills them."""
        if self.device.type != "cuda":
            return
        stream = torch.cuda.current_stream(self.device)
        for slot_id in set(slot_ids):
            self.events[slot_id].record(stream)


class FencedWorkerPool(WorkerProcesses, BatchPool):
    """Worker processes that write this process's staging slots (the GPU image workers, NVDEC
    worker processes): each is an executor; a task is handed to its worker once the fences of
    its slots are recorded. A subclass sets :attr:`slots` and :attr:`fences` before it starts
    its workers."""

    slots: list
    fences: SlotFences

    @property
    def ways(self) -> int:
        return self.num_workers

    def submit(self, worker: int, task: FillTask) -> None:
        self.fences.copied_out(task.slot_ids)
        self.put(worker, task)

    def shutdown(self) -> None:
        super().shutdown()  # the workers are joined: no kernel of theirs uses the slots
        self.slots = []
