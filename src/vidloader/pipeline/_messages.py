"""Every message that crosses between the loader and its pools or worker processes.

One module, so a message's shape is written once and read by name everywhere. Messages are
small frozen dataclasses: they pickle (they travel through ``multiprocessing`` queues) and a
field added here cannot be forgotten by a positional unpacking elsewhere. A worker's task
queue carries, in order: one start message (:class:`CpuWorkerStart` or
:class:`DemuxWorkerStart`), tasks (:class:`FillTask` or :class:`DemuxTask`), and
:data:`STOP`. Its results are :class:`Ready`, then :class:`RowsFilled` /
:class:`PacketsDemuxed`, or :class:`Failure`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

#: Sent on a worker's task queue to stop it.
STOP = None


@dataclasses.dataclass(frozen=True)
class CpuWorkerStart:
    """A CPU decode worker's arguments: the loader's resolved config (without its device:
    unpickling a ``torch.device`` imports torch, which CPU workers never load). Its staging
    slots (a :class:`~._shared_slots.SharedSlots`) come with its fork request instead."""

    worker_id: int
    config: Any  # LoaderConfig
    nice: int = 0  # added to the worker's niceness (the combo's CPU side: spare cycles only)
    #: The cores the worker may run on (``None``: wherever it was started): the combo keeps
    #: its CPU decoders off the cores it leaves to the threads feeding NVDEC.
    cpus: tuple[int, ...] | None = None


@dataclasses.dataclass(frozen=True)
class DemuxWorkerStart:
    """A demux worker's arguments (separation mode): the index, the error policy, the videos
    routed to the CPU and whether NVTX ranges are on: what it needs, not the whole
    ``LoaderConfig``."""

    worker_id: int
    index: Any  # VideoIndex
    skips_bad_files: bool
    cpu_only: np.ndarray | None
    nvtx: bool = False
    #: The loader's process has a CPU fallback executor (``fallback="cpu"``): a task whose
    #: demux fails with a media error (not a missing or stale file) is reported, not raised,
    #: whatever ``on_error`` says, so the loader's process decodes its file on the CPU.
    falls_back: bool = False
    #: How the names of this pool's shared-memory segments begin (``_payloads.SharedPayloads``),
    #: so that the pool removes those of a worker stopped mid-part at its shutdown.
    segment_prefix: str = "psm_"


@dataclasses.dataclass(frozen=True)
class Ready:
    """A worker has started and waits for tasks."""

    worker_id: int


@dataclasses.dataclass(frozen=True)
class FillTask:
    """A unit of work: ``plans[i]`` fills rows ``row_starts[i]:`` of slot ``slot_ids[i]``."""

    slot_ids: list[int]
    plans: list  # BatchPlan
    row_starts: list[int]
    unit: int = -1  # the pool's number for the unit, echoed in its RowsFilled

    @property
    def first_batch(self) -> int:
        return self.plans[0].batch_index


@dataclasses.dataclass(frozen=True)
class DemuxTask:
    """Separation mode: demux tasks ``start:stop`` of the unit ``key``'s ``plan_tasks(plans)``
    into Annex-B packet bundles (part ``part`` of the unit)."""

    key: int
    plans: list
    part: int
    start: int
    stop: int


@dataclasses.dataclass(frozen=True)
class RowsFilled:
    """Rows ``row_start:row_start + len(valid)`` of batch ``batch_index`` are in slot
    ``slot_id``. ``valid[r]`` is False for a row whose file failed (``on_error="skip"``);
    ``errors`` lists ``(path, message)`` of those files; ``stats`` are decode counters (a
    unit's counters ride on its first message, the others carry zeros)."""

    batch_index: int
    slot_id: int
    valid: np.ndarray
    errors: list
    stats: dict
    row_start: int = 0
    executor: str = ""  # which executor filled them ("cpu", "nvdec"), for the loader's shares
    fallbacks: dict = dataclasses.field(default_factory=dict)  # path -> why, files decoded on the CPU instead
    unit: int = -1  # the FillTask's unit number


@dataclasses.dataclass(frozen=True)
class DemuxFailed:
    """A task of a demux part whose demux failed (the file's :class:`MediaError`).

    ``on_cpu``: the file is not gone or stale, and the loader's process has a CPU fallback:
    it decodes the task there (its bundle is ``None``). Else the task's samples are skipped
    (``on_error="skip"``) except those of ``kept``: positions in the task's GOPs that
    demuxed alone, whose packets are its bundle (``None`` when there are none)."""

    video: int
    path: str
    message: str
    on_cpu: bool = False
    kept: tuple = ()


@dataclasses.dataclass(frozen=True)
class PacketsDemuxed:
    """A demux part's bundles: payloads in the shared-memory segment ``segment`` (``None``
    when there is no byte), the bundles without them in ``light`` (see
    ``_payloads.SharedPayloads.pack``), and a :class:`DemuxFailed` per failed task."""

    key: int
    light: list
    failed: list
    part: int
    segment: Any  # _payloads.Segment | None


@dataclasses.dataclass(frozen=True)
class Failure:
    """A unit failed: the first batch it fills (``-1`` when a worker failed to start), its
    slots, the error, the remote traceback and the file, when one is to blame."""

    batch_index: int
    slot_ids: Any
    message: str
    traceback: str
    path: str | None = None
    unit_key: int | None = None  # separation mode: the unit whose demux failed
    unit: int = -1  # the failed task's ``FillTask.unit`` (the pool's number for it)
