"""The NVDEC executor: GOPs demuxed to Annex B (here or in CPU workers), decoded on the GPU.

Frames never leave the GPU: NVDEC writes NV12 (8-bit video) or P016 (10/12-bit) into device
memory, DLPack hands it to torch without a copy, and ``to_rgb(size)`` converts and resizes it
with torch ops on the GPU. Codecs: H.264, HEVC, AV1 and VP9, 4:2:0, as far as this GPU's NVDEC
decodes them (:mod:`vidloader.decoding.nvdec._caps`); anything else is refused with
:class:`UnsupportedCodecError` naming the codec and profile, before any packet is read.

Two ways in:

* :meth:`NvdecExecutor.decode` (the :class:`Executor` contract): demuxes in this process.
* :meth:`NvdecExecutor.decode_bundle`: separation mode; the packets come as a
  :class:`PacketBundle` demuxed elsewhere (:func:`vidloader.decoding.nvdec._annexb.demux_gops` in a
  CPU worker process, which never touches CUDA).

With ``num_decoders > 1``, GOPs are decoded by a :class:`DecoderPool` of threads. Two ways out:

* :meth:`NvdecExecutor.decode_batch` (and ``decode``): a per-frame sink called on the caller's
  thread, task by task, frames ascending.
* :meth:`NvdecExecutor.submit_batch`: the loader's path. A per-GOP sink runs *on the decoder
  thread* as the GOP is decoded, with the GOP's wanted frames stacked (``stack_frames`` at a
  time, 16 by default: what bounds the decoded frames waiting on the GPU), so colour
  conversion and resize run batched and in parallel with other GOPs' decoding, and the call
  returns at once: the caller can submit the next unit of work before waiting for this one
  (:meth:`PendingBatch.wait`), so decoders never drain between units.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, wait

import numpy as np
import torch

from ..._utils._imports import require
from ..._utils._nvtx import Ranges
from ...constants import DEFAULT_STACK_FRAMES
from ...errors import BackendUnavailableError, ConfigError, CorruptVideoError, UnsupportedCodecError
from ...index import VideoRecord
from ...processing._nv12 import nv12_rows
from .._base import DecodeTask, Executor, FrameSink, GopRequest
from .._memory import gpu_memory_guard, release_frames
from ._annexb import ContainerCache, demux_gops, full_gop_requests
from ._bundle import PacketBundle
from ._caps import NvdecCaps, needed_queries, nvdec_decodability, query_nvdec_caps
from ._decoder import DecoderSlot, SuspectGopError
from ._frame import NvdecFrame, NvdecFrames, record_stream, stack_surfaces
from ._gop_cache import FrameCache, GopPacketCache
from ._pool import DecoderPool, shared_stream
from ._status_tap import Lease
from ._surface_copy import copy_rows, stream_handle

log = logging.getLogger(__name__)

#: Decoded NV12 frames kept on the GPU per executor (0 disables the frame cache). Off by
#: default: no workload measured hits it often enough to pay for it. Its views keep every
#: stack alive until evicted, so each stack is a fresh allocation, and each frame's ``put`` is
#: Python work on GIL-bound decoder threads (session17-3 on clips-head: 10% of their samples,
#: no hit). Without it W1 in stream order ran 1.09x faster with stacks of 16, uniform random
#: frames the same (``session21-8``). ``nvdec_options["frame_cache_bytes"]`` turns it on.
DEFAULT_FRAME_CACHE_BYTES = 0
#: Demuxed GOPs kept in host memory per executor (0 disables the packet cache).
DEFAULT_PACKET_CACHE_BYTES = 128 << 20

#: What a failed allocation was for, in a :class:`~vidloader.errors.GpuMemoryError`: the
#: executor's own copies of decoded pictures, and the sink's work (its conversion and writes).
FRAME_COPIES = "copies of decoded frames (NVDEC surfaces cloned for delivery and the frame cache)"
CONVERSION = ("the colour conversion of decoded frames (NV12 to RGB, resize, crop) and their "
              "writes into the batch's staging slots")

#: ``sink(task_position, frame_index, frame)`` for :meth:`NvdecExecutor.decode_batch`.
BatchSink = Callable[[int, int, NvdecFrame], None]
#: ``sink(task_position, frame_indices, frames)`` for :meth:`NvdecExecutor.submit_batch`: one
#: call per stack of a GOP's wanted frames (ascending, at most ``stack_frames`` of them).
GopSink = Callable[[int, list, NvdecFrames], None]


def load_pynvvideocodec():
    """Import PyNvVideoCodec after checking for a CUDA GPU (its import needs the driver)."""
    if not torch.cuda.is_available():
        raise BackendUnavailableError(
            "backend='nvdec' needs an NVIDIA GPU, but no CUDA GPU is visible to torch "
            "(torch.cuda.is_available() is False); use backend='cpu'"
        )
    return require("PyNvVideoCodec", purpose="backend='nvdec'")


def check_nvdec_supported(record: VideoRecord, caps: NvdecCaps) -> None:
    """Raise :class:`UnsupportedCodecError` unless NVDEC (``caps``) can decode ``record``; the
    message names the codec and profile (:func:`nvdec_decodability`'s reason)."""
    ok, reasons = nvdec_decodability([record], caps)
    if not ok[0]:
        raise UnsupportedCodecError(record.path, f"{reasons[0]}; use backend='cpu' for it")


@dataclasses.dataclass(eq=False)
class _Job:
    """One GOP to decode for the task at position ``pos`` of a batch."""

    pos: int
    record: VideoRecord
    gop: GopRequest
    bundle: PacketBundle | None = None  # packets given (separation mode), else demux
    g: int = 0

    def __str__(self) -> str:  # an NVTX range's detail, formatted only when ranges are on
        return f"{self.record.path}@{self.gop.keyframe}"


#: The batch path copies each wanted frame once, into its row of the GOP's stacked tensor
#: (False: a private copy per frame, then a stacked copy, as before session 9; kept for
#: ``benchmarks/diag/seq_ab.py``).
STACK_IN_ROWS = True


@dataclasses.dataclass(eq=False)
class _Result:
    frames: list[tuple[int, torch.Tensor]]
    packets: int
    decoded: int
    event: torch.cuda.Event | None
    delivered: int = 0
    #: With a ``flush`` (the batch path): the wanted frames handed to it, ascending.
    flushed: list[int] = dataclasses.field(default_factory=list)


class NvdecExecutor(Executor):
    """Decodes tasks with NVDEC through PyNvVideoCodec; frames stay on the GPU.

    One decoder per codec is created lazily and reused for every video (flushed after each
    GOP, reconfigured when the size changes). Create the executor in the process that owns the
    GPU, after any worker processes were forked.

    Args:
        device: CUDA device index.
        max_width, max_height: decoder surface maximum; set them to the dataset's largest
            size to never re-create a decoder (0: grow as larger videos come).
        num_decoders: decoder threads (1: decode on the calling thread, frames delivered
            straight from the decoder's surface without a copy).
        frame_cache_bytes: GPU bytes of decoded NV12 frames kept, keyed by (file, frame):
            a request in a GOP decoded moments ago costs no decode. 0 disables.
        packet_cache_bytes: host bytes of demuxed GOPs kept, keyed by (file, keyframe). 0
            disables; when enabled, whole GOPs are demuxed so later requests can hit.
        skip_nonref: never feed NVDEC the packets of non-reference pictures (H.264
            ``nal_ref_idc == 0``, HEVC top-sub-layer ``*_N`` pictures) that no request wants:
            about a third of a GOP with two B-frames between references, exact (tested).
        stack_frames: on the batch path (:meth:`submit_batch`), the most decoded frames a
            decoder thread stacks before handing them to the sink: a GOP with more wanted
            frames reaches the sink in several calls of at most this many. It bounds the GPU
            memory of decoded frames waiting for conversion (``num_decoders × stack_frames``
            NV12 pictures) and of the conversion's float intermediates, which PyTorch's
            caching allocator keeps per decoder stream.
        caps: what this GPU's NVDEC decodes; default: asked from the driver
            (:func:`query_nvdec_caps`) for each kind of video as it first comes.
        nvtx: emit NVTX ranges ``vidloader.demux`` and ``vidloader.decode`` (each naming the
            file and keyframe) on the thread that does the work (default False: no cost).

    Concealed damage: from its first decode to :meth:`close`, the executor holds the
    process's NVDEC status tap (:mod:`._status_tap`; fd 1 goes through a pipe). A GOP during
    whose decode NVDEC reported a decode error is decoded once more alone (the report names
    no decoder); still suspect, it raises :class:`~._decoder.SuspectGopError` (a
    :class:`CorruptVideoError`) without delivering any of its frames, like a GOP NVDEC fails
    to decode. ``VIDLOADER_NVDEC_STATUS_TAP=0`` turns this off.

    Raises:
        BackendUnavailableError: no CUDA GPU is visible, or PyNvVideoCodec is missing.
    """

    name = "nvdec"
    batch_api = "gops"

    def __init__(
        self,
        *,
        device: int = 0,
        max_width: int = 0,
        max_height: int = 0,
        num_decoders: int = 1,
        frame_cache_bytes: int = DEFAULT_FRAME_CACHE_BYTES,
        packet_cache_bytes: int = DEFAULT_PACKET_CACHE_BYTES,
        skip_nonref: bool = True,
        stack_frames: int = DEFAULT_STACK_FRAMES,
        caps: NvdecCaps | None = None,
        nvtx: bool = False,
    ) -> None:
        super().__init__()
        if isinstance(stack_frames, bool) or not isinstance(stack_frames, int) or stack_frames < 1:
            raise ConfigError(f"stack_frames must be an int >= 1 (decoded frames a decoder thread "
                              f"holds before converting them), got {stack_frames!r}")
        self.stack_frames = stack_frames
        #: NV12 pictures held in GOP stacks awaiting conversion, now and at most so far, over
        #: all decoder threads (what ``stack_frames`` bounds; read by tests and the memory probe).
        self.frames_held = self.frames_held_peak = 0
        self._held_lock = threading.Lock()
        self.ranges = Ranges(nvtx)
        self._nvc = load_pynvvideocodec()
        self._caps = caps
        self._refused: dict[tuple[str, int], str | None] = {}  # (path, size) -> reason
        self.device = torch.device("cuda", int(device))
        self.max_width, self.max_height = int(max_width), int(max_height)
        self.skip_nonref = bool(skip_nonref)
        self.frame_cache = FrameCache(frame_cache_bytes)
        self.packet_cache = GopPacketCache(packet_cache_bytes)
        self._slot: DecoderSlot | None = None
        self._lease: Lease | None = None  # the status tap, held from the first decode to close
        self._containers = ContainerCache()
        self._pool = (DecoderPool(self._make_slot, num_decoders, device=self.device.index)
                      if num_decoders > 1 else None)

    def _make_slot(self, stream=None) -> DecoderSlot:
        """A decoder slot on ``stream`` (default: the device's shared stream for decoding on
        the caller's thread; see :mod:`._pool` on why streams are kept)."""
        return DecoderSlot(self._nvc, self.device.index, max_width=self.max_width,
                           max_height=self.max_height, skip_nonref=self.skip_nonref,
                           stream=stream if stream is not None else shared_stream(self.device.index),
                           status=self._lease.tap if self._lease is not None else None)

    @property
    def caps(self) -> NvdecCaps | None:
        """What this GPU's NVDEC decodes, as far as asked so far (``None`` before any task)."""
        return self._caps

    def check(self, record: VideoRecord) -> None:
        """Raise :class:`UnsupportedCodecError` (naming codec and profile) unless this GPU's
        NVDEC can decode ``record``; asks the driver about its kind of video the first time."""
        key = (record.path, record.size_bytes)
        if key not in self._refused:
            self._ensure_caps(record)
            ok, reasons = nvdec_decodability([record], self._caps)
            self._refused[key] = None if ok[0] else f"{reasons[0]}; use backend='cpu' for it"
        reason = self._refused[key]
        if reason is not None:
            raise UnsupportedCodecError(record.path, reason)

    def _ensure_caps(self, record: VideoRecord) -> None:
        want = needed_queries([record])
        if self._caps is not None and all(k in self._caps.entries for k in want):
            return
        with torch.cuda.device(self.device):
            new = query_nvdec_caps(self._nvc, gpu=self.device.index, queries=want)
        if self._caps is None:
            self._caps = new
        else:
            self._caps = dataclasses.replace(self._caps, entries={**self._caps.entries, **new.entries},
                                             engines=max(self._caps.engines, new.engines))

    @property
    def slots(self) -> list[DecoderSlot]:
        """The decoder slots created so far (for inspection and tests)."""
        return self._pool.slots if self._pool else [s for s in (self._slot,) if s is not None]

    # -- the Executor contract ------------------------------------------------------------

    def decode(self, task: DecodeTask, sink: FrameSink) -> None:
        """Decode ``task`` (demuxing here) and call ``sink(i, frame)`` per wanted frame."""
        self.decode_batch([task], lambda _pos, i, frame: sink(i, frame))

    def decode_bundle(self, task: DecodeTask, bundle: PacketBundle, sink: FrameSink) -> None:
        """Separation mode: decode ``task`` from packets demuxed elsewhere.

        ``bundle`` must hold one GOP per GOP of ``task`` (same keyframes, same order), e.g.
        ``demux_gops(task.record, task.gops)`` run in a CPU worker.
        """
        self.decode_batch([task], lambda _pos, i, frame: sink(i, frame), bundles=[bundle])

    def decode_batch(
        self,
        tasks: Sequence[DecodeTask],
        sink: BatchSink,
        *,
        bundles: Sequence[PacketBundle | None] | None = None,
    ) -> None:
        """Decode several tasks, overlapping their GOPs on the decoder pool.

        ``sink(pos, i, frame)`` is called on this thread for every wanted frame ``i`` of
        ``tasks[pos]``, task after task, frames ascending. ``bundles[pos]``, when given, holds
        the task's packets (separation mode); ``None`` entries are demuxed here.
        """
        jobs = self._jobs(tasks, bundles)
        consumer = torch.cuda.current_stream(self.device)
        with torch.cuda.device(self.device), gpu_memory_guard(FRAME_COPIES, self.device):
            if self._pool is None:
                self._run_inline(jobs, sink, consumer)
            else:
                self._run_pooled(jobs, sink, consumer)

    def submit_batch(
        self,
        tasks: Sequence[DecodeTask],
        sink: GopSink,
        *,
        bundles: Sequence[PacketBundle | None] | None = None,
    ) -> PendingBatch:
        """Start decoding ``tasks``; return at once with a handle to :meth:`PendingBatch.wait` on.

        ``sink(pos, indices, frames)`` is called for every GOP of ``tasks[pos]`` (and every GOP
        served from the frame cache) with that GOP's wanted frames, ascending, in stacks of at
        most :attr:`stack_frames` (one call for most GOPs; while the GOP is still decoding
        for the first stacks of a longer one), from a decoder thread
        whose CUDA stream is current: it must only enqueue GPU work and write to places no
        other call writes. Work it enqueues is ordered before the caller's current stream
        continues past :meth:`PendingBatch.wait`; work the caller enqueued before this call is
        ordered before the sink's. With ``num_decoders=1`` everything runs inside this call.
        """
        jobs = self._jobs(tasks, bundles, count=False)  # PendingBatch.wait counts
        consumer = torch.cuda.current_stream(self.device)
        ready = torch.cuda.Event()
        ready.record(consumer)
        if self._pool is None:
            if self._slot is None:
                self._slot = self._make_slot()
            results = [self._deliver_gop(self._slot, self._containers, job, sink, ready, consumer)
                       for job in jobs]
            return PendingBatch(self, jobs, results, consumer)
        futures = [self._pool.submit(self._deliver_gop, job, sink, ready, consumer) for job in jobs]
        return PendingBatch(self, jobs, futures, consumer)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
        if self._slot is not None:
            self._slot.close()
            self._slot = None
        if self._lease is not None:  # after the decoders: none of them decodes any more
            self._lease.release()
            self._lease = None
        self._containers.close()
        self.frame_cache.clear()
        self.packet_cache.clear()

    # -- planning -------------------------------------------------------------------------

    def _jobs(self, tasks: Sequence[DecodeTask], bundles, *, count: bool = True) -> list[_Job]:
        if self._lease is None:  # every way in passes here, before any slot is made
            self._lease = Lease()
        jobs: list[_Job] = []
        for pos, task in enumerate(tasks):
            self.check(task.record)
            self.stats.tasks += count
            bundle = bundles[pos] if bundles is not None else None
            if bundle is not None:
                # Not put into the packet cache: jobs that come with their packets never look
                # there, and the put copied every GOP of every unit on the loader's thread.
                _check_bundle(task, bundle)
            for g, gop in enumerate(task.gops):
                jobs.append(_Job(pos, task.record, gop, bundle, g))
        return jobs

    def _packets(self, job: _Job, containers: ContainerCache) -> tuple[PacketBundle, int]:
        if job.bundle is not None:
            return job.bundle, job.g
        rec, gop = job.record, job.gop
        if self.packet_cache.max_bytes == 0:
            with self.ranges("vidloader.demux", job):
                return demux_gops(rec, [gop], container_cache=containers), 0
        bundle = self.packet_cache.get(rec.path, gop.keyframe, gop.last)
        if bundle is None:
            with self.ranges("vidloader.demux", job):
                bundle = demux_gops(rec, full_gop_requests(rec, [gop]), container_cache=containers)
            self.packet_cache.put(bundle)
        return bundle, 0

    def _cached(self, job: _Job) -> list[tuple[int, torch.Tensor]] | None:
        """The GOP's wanted frames from the frame cache, or ``None`` unless all are there."""
        cache, path = self.frame_cache, job.record.path
        if cache.max_bytes == 0 or not cache.has_all(path, job.gop.frames):
            return None
        # Each frame once, as a decode delivers it (clips of one unit may want a frame twice:
        # the sink writes every row that wants it, and ``delivered`` counts it once).
        frames = [(i, cache.get(path, i)) for i in dict.fromkeys(job.gop.frames.tolist())]
        return None if any(t is None for _, t in frames) else frames

    # -- inline: decode on this thread, deliver straight from the surface ----------------------

    def _run_inline(self, jobs: list[_Job], sink: BatchSink, consumer) -> None:
        if self._slot is None:
            self._slot = self._make_slot()
        slot = self._slot
        slot.stream.wait_stream(consumer)  # the sink may write into the caller's buffers
        try:
            with torch.cuda.stream(slot.stream):
                for job in jobs:
                    cached = self._cached(job)
                    if cached is not None:
                        self._deliver_cached(job, cached, sink, consumer)
                    else:
                        self._decode_inline(slot, job, sink, consumer)
        finally:
            consumer.wait_stream(slot.stream)

    def _decode_inline(self, slot: DecoderSlot, job: _Job, sink: BatchSink, consumer) -> None:
        """Decode ``job``'s GOP on this thread. Without a status tap each wanted frame goes to
        ``sink`` straight from the decoder's surface; with one, frames are copied and held
        until the GOP is vouched for (a GOP NVDEC reported an error in is not delivered, and
        its surfaces are recycled by the next ``Decode``)."""
        rec, wanted = job.record, set(job.gop.frames.tolist())
        keep = self.frame_cache.max_bytes > 0
        delivered: list[int] = []

        def deliver(i: int, nv12: torch.Tensor, *, copied: bool = False) -> None:
            if keep and i >= 0:
                nv12 = nv12 if copied else _compact(nv12, rec)
                self.frame_cache.put(rec.path, i, nv12)
            if i in wanted:
                wanted.discard(i)
                delivered.append(i)
                with gpu_memory_guard(CONVERSION, self.device):
                    sink(job.pos, i, NvdecFrame(nv12, rec, consumer))

        def attempt(alone: bool) -> tuple[int, int, list]:
            held: list[tuple[int, torch.Tensor]] = []  # this attempt's frames, copied

            def on_frame(i: int, nv12: torch.Tensor) -> None:
                if slot.status is None:
                    deliver(i, nv12)
                elif (keep and i >= 0) or i in wanted:
                    held.append((i, _compact(nv12, rec)))

            with self.ranges("vidloader.decode", job):
                packets, decoded = slot.decode_gop(rec, bundle, g, job.gop.frames, on_frame, alone=alone,
                                                   wants=None if keep else wanted.__contains__)
            return packets, decoded, held

        bundle, g = self._packets(job, self._containers)
        packets, decoded, held = _vouched(attempt, job)
        for i, nv12 in held:  # the GOP is vouched for
            deliver(i, nv12, copied=True)
        self.stats.decoded += decoded
        self._count(job, packets, len(delivered), wanted)

    def _deliver_cached(self, job: _Job, frames, sink: BatchSink, consumer) -> None:
        for i, nv12 in frames:
            with gpu_memory_guard(CONVERSION, self.device):
                sink(job.pos, i, NvdecFrame(nv12, job.record, consumer))
            self.stats.delivered += 1

    def _count(self, job: _Job, packets: int, delivered: int, missing) -> None:
        self.stats.seeks += 1
        self.stats.packets += packets
        self.stats.delivered += delivered
        if missing:
            raise _missing_frames(job, missing)

    # -- pooled: GOPs decoded on decoder threads, delivered here in order ---------------------

    def _run_pooled(self, jobs: list[_Job], sink: BatchSink, consumer) -> None:
        window = 2 * self._pool.num_decoders  # bounds the cloned frames waiting for delivery
        pending: deque[tuple[_Job, object]] = deque()
        try:
            for job in jobs:
                cached = self._cached(job)  # taken now: later puts may evict them
                pending.append((job, cached if cached is not None else self._pool.submit(self._decode_pooled, job)))
                while len(pending) >= window:
                    self._deliver_pooled(*pending.popleft(), sink, consumer)
            while pending:
                self._deliver_pooled(*pending.popleft(), sink, consumer)
        finally:
            for _, fut in pending:
                if isinstance(fut, Future):
                    fut.cancel()

    def _decode_pooled(self, slot: DecoderSlot, containers: ContainerCache, job: _Job, *,
                       keep_all: bool = True, flush=None) -> _Result:
        """:meth:`_decode_once`, again alone if the status tap found the GOP suspect."""
        with torch.cuda.device(slot.device), torch.cuda.stream(slot.stream):
            bundle, g = self._packets(job, containers)
            return _vouched(lambda alone: self._decode_once(slot, job, bundle, g, keep_all=keep_all,
                                                            flush=flush, alone=alone), job)

    def _decode_once(self, slot: DecoderSlot, job: _Job, bundle: PacketBundle, g: int, *,
                     keep_all: bool, flush, alone: bool) -> _Result:
        """Decode ``job``'s GOP on ``slot``; keep a private copy of each wanted frame (and,
        with ``keep_all`` and a frame cache, of every frame).

        With ``flush`` (the batch path: wanted frames only), each wanted frame is instead
        copied once, straight into its row of a stack of at most :attr:`stack_frames`
        pictures, and each full stack goes to ``flush(indices, stack)`` as soon as it is
        full, during the decode: a copy per frame then a stacked copy had every delivered
        frame twice at once (0.79 + 0.70 GiB at peak on W1, session9-1), and a stack of the
        whole GOP held all its wanted frames (1.57 GiB on sequential W1, session9-6). The
        last stack is flushed once the GOP is decoded, if no wanted frame is missing (else
        :class:`CorruptVideoError` naming them). ``_Result.flushed`` lists what was flushed.

        A full stack can reach the sink before the status tap has vouched for the GOP (at its
        end). That delivers nothing concealed: a suspect GOP's rows are written again by its
        re-decode alone or by the CPU fallback, or its samples are skipped or the unit raises;
        and the frame cache takes a GOP's frames only once it is vouched for
        (:meth:`_deliver_gop`)."""
        rec, wanted = job.record, set(job.gop.frames.tolist())
        keep = keep_all and self.frame_cache.max_bytes > 0
        frames: list[tuple[int, torch.Tensor]] = []
        stack = _Stack(self, rows=nv12_rows(rec.height), width=rec.width, wanted=len(wanted),
                       flush=flush) if flush is not None else None
        seen: set[int] = set()

        def on_frame(i: int, nv12: torch.Tensor) -> None:
            if stack is not None:
                if i in wanted and i not in seen:  # a repeat is kept once
                    seen.add(i)
                    stack.add(i, nv12)
            elif i in wanted or (keep and i >= 0):
                frames.append((i, _compact(nv12, rec)))  # the surface is recycled next call

        try:
            with self.ranges("vidloader.decode", job):
                packets, decoded = slot.decode_gop(rec, bundle, g, job.gop.frames, on_frame,
                                                   alone=alone,
                                                   wants=None if keep else wanted.__contains__)
            if stack is not None:
                if seen != wanted:  # before the last stack: nothing of a bad GOP's tail
                    raise _missing_frames(job, wanted - seen)
                stack.flush()
            event = torch.cuda.Event()
            event.record(slot.stream)
        finally:
            if stack is not None:
                stack.drop()  # a failed GOP's partial stack: its frames are no longer held
        return _Result(frames, packets, decoded, event,
                       flushed=stack.flushed if stack is not None else [])

    def _deliver_pooled(self, job: _Job, fut, sink: BatchSink, consumer) -> None:
        if not isinstance(fut, Future):
            self._deliver_cached(job, fut, sink, consumer)
            return
        res: _Result = fut.result()
        consumer.wait_event(res.event)
        wanted = set(job.gop.frames.tolist())
        self.stats.decoded += res.decoded
        delivered = 0
        for i, nv12 in res.frames:
            record_stream(nv12, consumer)
            if self.frame_cache.max_bytes > 0:
                self.frame_cache.put(job.record.path, i, nv12)
            if i in wanted:
                wanted.discard(i)
                delivered += 1
                with gpu_memory_guard(CONVERSION, self.device):
                    sink(job.pos, i, NvdecFrame(nv12, job.record, consumer))
        self._count(job, res.packets, delivered, wanted)


    # -- submit_batch: decode and deliver a GOP on a decoder thread ---------------------------

    def _deliver_gop(self, slot: DecoderSlot, containers: ContainerCache, job: _Job, sink: GopSink,
                     ready, consumer) -> _Result:
        """Decode ``job``'s GOP (or take it from the frame cache) and hand its wanted frames to
        ``sink``, stacked, at most :attr:`stack_frames` per call; all on ``slot``'s stream.
        Returns the counts and a done-event. Runs on a decoder thread: an allocation that
        fails here reaches :meth:`PendingBatch.wait` as a
        :class:`~vidloader.errors.GpuMemoryError` through the future."""
        with (torch.cuda.device(slot.device), torch.cuda.stream(slot.stream),
              gpu_memory_guard(FRAME_COPIES, slot.device)):
            slot.stream.wait_event(ready)  # the caller's earlier work on the sink's buffers
            want = set(job.gop.frames.tolist())

            to_keep: list[tuple[list[int], torch.Tensor]] = []  # cached once vouched for

            def deliver(indices: list[int], stacked: torch.Tensor, *, keep: bool = True) -> None:
                if keep and self.frame_cache.max_bytes > 0:
                    to_keep.append((indices, stacked))
                with gpu_memory_guard(CONVERSION, slot.device):
                    sink(job.pos, indices, NvdecFrames(stacked, job.record, consumer))

            cached = self._cached(job)
            if cached is not None:
                for _, t in cached:
                    record_stream(t, slot.stream)  # cached on another stream
                res = _Result([], 0, 0, None)
                delivered = self._deliver_stacked(cached, lambda i, s: deliver(i, s, keep=False))
            elif STACK_IN_ROWS:  # raises if a wanted frame is missing
                res = self._decode_pooled(slot, containers, job, keep_all=False, flush=deliver)
                delivered = res.flushed
            else:
                res = self._decode_pooled(slot, containers, job, keep_all=False)
                wanted = [(i, t) for i, t in res.frames if i in want]
                missing = want - {i for i, _ in wanted}
                if missing:
                    raise _missing_frames(job, missing)
                delivered = self._deliver_stacked(wanted, deliver)
            # Vouched for (a suspect GOP raised above): a re-decode's stacks come after the
            # suspect attempt's, and their puts replace its frames.
            for indices, stacked in to_keep:
                self._keep(job, zip(indices, stacked))
            res.frames, res.flushed = [], []  # the future's result must not hold frames
            res.delivered = len(delivered)
            res.event = torch.cuda.Event()
            res.event.record(slot.stream)
        return res

    def _deliver_stacked(self, frames: list[tuple[int, torch.Tensor]], deliver) -> list[int]:
        """Hand separate frames to ``deliver(indices, stacked)`` in stacks (one copy each) of
        at most :attr:`stack_frames`; returns the indices delivered."""
        step = self.stack_frames
        for a in range(0, len(frames), step):
            part = frames[a : a + step]
            self._hold(len(part))
            try:
                deliver([i for i, _ in part], stack_surfaces([t for _, t in part]))
            finally:
                self._hold(-len(part))
        return [i for i, _ in frames]

    def _hold(self, frames: int) -> None:
        """Count ``frames`` more (or fewer) NV12 pictures held in GOP stacks."""
        with self._held_lock:
            self.frames_held += frames
            self.frames_held_peak = max(self.frames_held_peak, self.frames_held)

    def _keep(self, job: _Job, frames) -> None:
        """Put delivered frames into the frame cache (readable from any stream after this).

        On this path only the frames delivered are kept, as views of the GOP's stacked
        tensor: caching costs no copy, and a GOP's views are put, and so evicted, together.
        Frames decoded but not wanted are not kept (most were not decoded at all: see
        ``skip_nonref``)."""
        if self.frame_cache.max_bytes == 0:
            return
        for i, nv12 in frames:
            self.frame_cache.put(job.record.path, i, nv12)


class _Stack:
    """A GOP's wanted frames on their way to the sink, at most ``executor.stack_frames`` at a
    time: each frame is copied once from the decoder's surface into its row of the current
    stack, and a full stack is flushed (handed to ``flush(indices, stack)``) at once, so the
    next one can reuse its memory on the same stream; the last one when the caller says."""

    def __init__(self, executor: NvdecExecutor, *, rows: int, width: int, wanted: int, flush) -> None:
        self.executor, self.rows, self.width = executor, rows, width
        self.left = wanted  # wanted frames not stacked yet
        self._flush = flush
        self.tensor: torch.Tensor | None = None
        self.indices: list[int] = []
        self.flushed: list[int] = []
        self._stream: int | None = None  # the raw handle of the stack's stream, once known

    def add(self, i: int, nv12: torch.Tensor) -> None:
        if self.tensor is None:
            n = min(self.executor.stack_frames, self.left)
            self.tensor = nv12.new_empty((n, self.rows, self.width))
            self.executor._hold(n)
            self._stream = stream_handle(self.tensor.device)
        copy_rows(self.tensor[len(self.indices)], nv12, self.rows, self.width, self._stream)
        self.indices.append(i)
        self.left -= 1
        # A full stack goes now, but the GOP's last one after the decode (the caller): most
        # GOPs fit one stack, and are converted once decoded and checked, as before stacks.
        if len(self.indices) == self.tensor.shape[0] and self.left:
            self.flush()

    def flush(self) -> None:
        """Hand the stacked frames to the sink and let go of the stack."""
        if self.tensor is None:
            return
        tensor, indices = self.tensor[: len(self.indices)], self.indices
        try:
            self._flush(indices, tensor)
        finally:
            self.drop()
        self.flushed.extend(indices)

    def drop(self) -> None:
        """Let go of the stack unflushed (the GOP failed)."""
        if self.tensor is not None:
            self.executor._hold(-self.tensor.shape[0])
        self.tensor, self.indices = None, []


class PendingBatch:
    """A :meth:`NvdecExecutor.submit_batch` in flight."""

    def __init__(self, executor: NvdecExecutor, jobs: list[_Job], results: list, consumer) -> None:
        self._executor, self._jobs, self._results, self._consumer = executor, jobs, results, consumer
        self._done = False

    def done(self) -> bool:
        """Whether every GOP has finished (so :meth:`wait` will not block on the decoders)."""
        return all(r.done() for r in self._results if isinstance(r, Future))

    def wait(self) -> None:
        """Block until every GOP is delivered; order the caller's stream after the sinks' work
        and add the counts to the executor's stats.

        Raises:
            CorruptVideoError / UnsupportedCodecError: a GOP failed (the other GOPs are
                finished or cancelled first, so no sink runs after this returns).
            GpuMemoryError: the GPU ran out of memory for a decoder, a decoded frame or the
                sink's conversion (cancelled the same way).
        """
        if self._done:
            return
        self._done = True
        stats = self._executor.stats
        try:
            for job, res in zip(self._jobs, self._results):
                if isinstance(res, Future):
                    res = res.result()
                self._consumer.wait_event(res.event)
                stats.decoded += res.decoded
                stats.packets += res.packets
                stats.delivered += res.delivered
                stats.seeks += res.packets > 0
        except BaseException as exc:
            self.cancel(keep=exc)
            raise
        stats.tasks += len({job.pos for job in self._jobs})

    def _release_failures(self, raised: BaseException | None) -> None:
        """Let go of the other GOPs' failures. Each failed future keeps its exception, whose
        traceback keeps the frames it passed through: the sink's, holding the unit's staging
        views. The caller clears the frames of the one raised; after an out-of-memory error
        on two decoder threads at once, the other's kept a 19 MiB staging slot alive on the
        H100 (``benchmarks/results/gpu/session9-11``)."""
        for fut in self._results:
            if isinstance(fut, Future) and fut.done() and not fut.cancelled():
                other = fut.exception()
                if other is not None and other is not raised:
                    release_frames(other)
        self._results = []

    def cancel(self, *, keep: BaseException | None = None) -> None:
        """Cancel GOPs not started and wait for the running ones (no sink runs afterwards);
        let go of the failed GOPs' frames, but those of ``keep`` (the error being raised)."""
        self._done = True
        futures = [r for r in self._results if isinstance(r, Future)]
        for fut in futures:
            fut.cancel()
        wait(futures)
        self._release_failures(keep)


def _vouched(attempt, job: _Job):
    """``attempt(alone=False)``; if the status tap found that GOP suspect while other GOPs
    were decoded too (the line names no decoder), ``attempt(alone=True)``: decoded while no
    other GOP is, its verdict is its own (raised if suspect again). A suspect attempt's
    frames are dropped, or, where full stacks went to the sink during the decode, written
    again by the next attempt or never delivered (see :meth:`NvdecExecutor._decode_once`)."""
    try:
        return attempt(False)
    except SuspectGopError as exc:
        if exc.alone:
            raise
        log.info("%s: GOP at keyframe %d suspect while decoded beside others; decoding it again "
                 "alone", job.record.path, job.gop.keyframe)
    return attempt(True)


def _missing_frames(job: _Job, missing) -> CorruptVideoError:
    return CorruptVideoError(
        job.record.path, f"NVDEC did not output frames {sorted(missing)[:8]} of the GOP "
        f"at keyframe {job.gop.keyframe}; the file is damaged or the index is stale",
    )


def _compact(nv12: torch.Tensor, rec: VideoRecord) -> torch.Tensor:
    """A private, unpadded copy of a decoder surface view (NV12 or P016)."""
    rows = nv12_rows(rec.height)
    return nv12[:rows, : rec.width].clone()


def _check_bundle(task: DecodeTask, bundle: PacketBundle) -> None:
    keys = np.asarray([g.keyframe for g in task.gops], np.int64)
    if bundle.path != task.record.path or not np.array_equal(bundle.gop_keyframes, keys):
        raise CorruptVideoError(
            task.record.path, f"packet bundle of {bundle.path!r} with GOPs at "
            f"{bundle.gop_keyframes.tolist()} does not match the task's GOPs at {keys.tolist()}",
        )
