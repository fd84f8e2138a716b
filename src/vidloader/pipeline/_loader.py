"""``VideoLoader``, the front: checks and resolves the options once (a
:class:`~._config.LoaderConfig`), plans epochs with the sampler, starts a pool and a
:class:`~._scheduler.Scheduler`, and turns finished batches into dicts; resume and shutdown."""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import logging
import math
import os
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Literal

import torch

from .._utils._nvtx import resolve_ranges
from .._utils._procs import start_server
from ..constants import (
    DEFAULT_DECODER_THREADS,
    DEFAULT_LOOKAHEAD_BATCHES,
    DEFAULT_MAX_OPEN_FILES,
    DEFAULT_NVDEC_DEMUX_WORKERS,
    DEFAULT_PREFETCH_PER_WORKER,
)
from ..decoding import DecodeStats, release_frames
from ..errors import ConfigError, GpuMemoryError, UnsupportedCodecError, VidloaderError
from ..index import VideoIndex
from ..processing import Process, as_outputs
from ..sampling import RandomFrames, Sampler, detect_rank_world, resolve_labels
from ._backends import make_pool
from ._collect import Collector
from ._config import (
    DEFAULT_UNITS_DECODING,
    LoaderConfig,
    backend_uses_nvdec,
    check_options,
    decoded_per_delivered,
    demux_ahead_bytes,
    resolve_device,
    resolve_nvdec_options,
    staging_shapes,
)
from ._contract import BatchPool
from ._memory import (
    MemoryPlan,
    PlanInputs,
    VideoSizes,
    apply_knobs,
    batches_reached,
    cublas_workspace_bytes,
    fit_budget,
    gpu_staging_buffers,
    make_plan,
    nvdec_knobs,
)
from ._nvdec_workers import units_per_process
from ._routing import cpu_only_mask, nvdec_routing
from ._scheduler import Scheduler
from ._units import (
    STREAM_GOP_STRIDE,
    has_block_units,
    has_row_affinity,
    max_unit_batches,
    stream_gop_span,
    stream_gop_units,
)

log = logging.getLogger(__name__)
_LIVE_LOADERS: weakref.WeakSet = weakref.WeakSet()
#: The fork servers each backend's workers come from (:mod:`.._utils._procs`).
_SERVERS_BY_BACKEND = {"nvdec": ("demux",), "combo": ("decode", "demux")}


#: Whether NVDEC with demux workers (or in worker processes, ``nvdec_processes``) takes a plan
#: of streams as the GOPs its rows walk through
#: (:attr:`VideoLoader.uses_stream_gops`); False: whole batches, as before session 14 (kept for
#: A/B runs, ``benchmarks/diag/stream_gops_ab.py``).
STREAM_GOP_UNITS = True


def takes_stream_gops(plan, *, backend: str, num_workers: int, lookahead: int | None) -> bool:
    """Whether a loader with these settings hands out a plan as GOPs of streams
    (:attr:`VideoLoader.uses_stream_gops`); ``plan()`` gives the epoch plan, asked last."""
    if not STREAM_GOP_UNITS or lookahead is not None or backend != "nvdec" or num_workers == 0:
        return False
    return has_row_affinity(plan())


def takes_block_units(plan, *, backend: str, num_workers: int, lookahead: int | None) -> bool:
    """Whether a loader with these settings hands out a plan one GOP-local block at a time
    (:attr:`VideoLoader.uses_block_units`): a plan of blocks, ``lookahead`` not given; a plan
    of streams only to CPU workers (each keeps its rows' videos open)."""
    if lookahead is not None or not has_block_units(plan):
        return False
    return not has_row_affinity(plan) or (backend == "cpu" and num_workers > 0)


def _default_workers(backend: str, nvdec_processes: int) -> int:
    """``num_workers`` when not given: a process per core, but at most
    :data:`DEFAULT_NVDEC_DEMUX_WORKERS` demux workers for NVDEC decoding in this process."""
    cores = os.cpu_count() or 1
    if backend == "nvdec" and nvdec_processes == 1:
        return min(cores, DEFAULT_NVDEC_DEMUX_WORKERS)
    return cores


def _unit_workers(num_workers: int, nvdec_processes: int) -> int:
    """``num_workers`` as the choice of units sees it: with NVDEC worker processes, their
    number (each demuxes for itself, so ``num_workers`` is unused). Like demux workers, they
    take a plan of streams as the GOPs its rows walk through (:attr:`VideoLoader.uses_stream_gops`):
    each GOP piece is decoded from its keyframe once, by whichever process gets its unit (their
    units in flight: :meth:`VideoLoader._units_in_flight`)."""
    return nvdec_processes if nvdec_processes > 1 else num_workers


@atexit.register
def _shutdown_all() -> None:  # interpreter exit: no worker may outlive the program
    for loader in list(_LIVE_LOADERS):
        loader.shutdown()


def _from_config(name: str) -> property:
    """A read-only loader attribute that is the resolved config's ``name``."""
    return property(lambda self: getattr(self.config, name), doc=f"The resolved ``{name}``.")


class VideoLoader:
    """An iterable of batches of video frames or clips, decoded by worker processes.

    Each batch is a dict of tensors: one entry per output (``"frames"`` by default, shaped
    ``B×H×W×C`` for single frames or ``B×T×H×W×C`` for clips in the default layout), plus
    ``video_index`` and ``frame_index`` (int64) and ``label`` when labels are given.

    Args:
        index (VideoIndex): the videos (see :func:`vidloader.build_index`).
        sampler (Sampler): which frames or clips; default :class:`RandomFrames` (uniform over
            frames, each once per epoch).
        batch_size (int): samples per batch (with :class:`~vidloader.MultiCameraClips`, rigs:
            each fills one row per camera, and outputs are ``[B, cameras, ...]``).
        size ((int, int) | None): shortcut for ``processing=Process(size=size)``.
        processing (Process | dict[str, Process] | None): what to produce; a dict produces
            several named outputs from the same decoded frames.
        labels: a sequence aligned with the index's videos, a dict path→label, or a callable
            on the path.
        backend ("cpu" | "nvdec" | "combo"): decoding backend. ``"nvdec"`` decodes on the
            GPU given by ``device`` (default ``cuda:$LOCAL_RANK``) in this process; frames
            never leave it. ``"combo"`` decodes on CPU workers and NVDEC at once (README,
            "CPU and GPU at once").
        num_workers (int | None): CPU processes, forked from vidloader's fork server (they
            start in a fraction of a second and never re-run your script). With ``"cpu"`` they
            decode; with ``"nvdec"`` they only demux (separation mode) and this process
            decodes; with ``"combo"`` they decode on the CPU (at a lower priority) and a quarter
            as many more (at least one) demux for NVDEC. 0 does everything in the calling process
            (not with ``"combo"``). Default: the number of CPU cores; with ``"nvdec"`` in
            this process, at most :data:`~vidloader.constants.DEFAULT_NVDEC_DEMUX_WORKERS`
            (8: faster than 16 on 16 cores, where the decoding process needs them).
        prefetch (int): bounded prefetch: the loader holds ``lookahead × (num_workers +
            prefetch − 1)`` staging slots of one batch each, in shared memory (with NVDEC in
            separation mode, only ``lookahead × units_decoding`` of them hold a GPU buffer at
            once: see ``memory_budget``).
        lookahead (int | None): consecutive batches a worker plans and decodes together, so
            that a GOP several of them need is decoded once. Default: the sampler's
            ``preferred_lookahead`` if it has one, else 4.
        pin_memory (bool): return CPU batches in pinned memory (faster ``.cuda()``).
        device (str | torch.device | None): move each batch there (one non-blocking copy);
            dtype conversion and normalisation then run on that device.
        on_error ("raise" | "skip"): a bad video raises :class:`WorkerError` naming it, or is
            skipped (its samples dropped from the batch), logged and counted in ``stats``.
            GPU memory running out is not a bad video: :class:`GpuMemoryError` is raised
            either way, after the loader stopped and freed everything; iterate again once
            memory is free.
        drop_last (bool): drop the last, short batch of an epoch.
        rank, world_size (int | None): distributed shard; default from ``RANK``/``WORLD_SIZE``
            or ``torch.distributed``.
        persistent_workers (bool): keep workers between epochs.
        decoder_threads (int): FFmpeg threads per decode (``"cpu"``).
        nvdec_decoders (int | None): NVDEC decoders on threads, to keep the engines busy
            (``"nvdec"``, ``"combo"``). ``None`` (default): by NVDEC's work per delivered
            frame (a frame's pixels times the frames decoded for it in the first batches'
            plan): 16 for 1080p, down to 4 for small frames each decoded once, whose decoder
            threads would only contend for the GIL
            (:func:`~vidloader.pipeline._config.auto_nvdec_decoders`); the choice is in
            :attr:`memory_plan` (``decoders``).
        nvdec_options (Mapping | None): further :class:`~vidloader.decoding.nvdec.NvdecExecutor`
            options (``frame_cache_bytes``, ``packet_cache_bytes``, ``skip_nonref``,
            ``stack_frames``: decoded frames a decoder thread holds before converting them,
            default 16), ``units_decoding``: units of work queued on the decoders at once
            (default 4), and ``demux_ahead_bytes``: packet bytes the demux workers may hold
            ahead of the decoders (bytes or a string such as ``"1GiB"``; default 512 MiB;
            ``None``: no bound, every unit the staging slots admit is demuxed at once), the
            host memory's knob.
        fallback ("cpu" | "error"): what happens to files NVDEC cannot decode (``"nvdec"``,
            ``"combo"``): decoded on the CPU, or refused at construction.
        combo_share (float | None): with ``"combo"``, a fixed share of units for NVDEC;
            default: each side takes units as it frees up.
        memory_budget (int | str | None): GPU bytes the NVDEC side may plan for (``"nvdec"``,
            ``"combo"``): an int, or a string such as ``"3GiB"`` or ``"512MiB"``. The loader
            plans its staging buffers, GOP stacks, conversion workspace per decoder stream,
            cuBLAS workspaces, frame cache and NVDEC surfaces (:attr:`memory_plan`) and lowers
            the frame cache, the decoder threads (to 8 first), the stack frames and the units
            decoding (``_memory.BUDGET_STEPS``) until the plan fills at most 92% of the budget
            (``_memory.BUDGET_FILL``), trading throughput for memory; ``nvdec_decoders`` and
            ``nvdec_options`` are upper bounds then. With ``nvdec_processes``, the plan counts
            every process's decoders and CUDA context, and the same knobs are lowered in each
            (``units_decoding`` below 2 leaves each process one unit at a time, which frees
            staging slots, except with GOP-local blocks; a step that frees nothing is
            skipped). ``ConfigError`` if even one decoder does not fit. Default ``None``:
            planned for speed, nothing lowered.
        nvdec_processes (int): with ``"nvdec"``, processes that each demux and decode units on
            NVDEC with ``nvdec_decoders`` decoder threads of their own, writing into GPU slots
            shared with this process (CUDA IPC). Each has a GIL of its own, so small frames
            (SPDL's Kinetics setting) are decoded several times faster than by one process's
            threads, at the cost of a CUDA context, torch and decoders per process (GPU and
            host memory grow with it; ``memory_budget`` bounds the GPU's). With
            ``nvdec_decoders=None`` each process takes ``ceil(2 × one process's choice / K)``
            threads, at least 2 (``constants.PROCESS_DECODER_FACTOR``). ``num_workers`` is
            then unused: each process demuxes for itself. A plan of streams
            (``MultiCameraClips(streams=True)``) goes out as its GOPs, each decoded once by one
            process (1.9× one process in 4 on the W3 stream order, session 19), its GPU staging
            then holding ``8 × (uK + prefetch - 1) + GOP - 1`` batches, ``u = min(2,
            units_decoding)`` (101 slots, 19.5 GiB, with 4 processes for W3's 48 frames of
            1600×900 a batch; 35 GiB in all, session 23: mind the GPU's memory). Default 1:
            NVDEC in this process (demux workers per ``num_workers``).
        nvtx (bool | None): emit NVTX ranges (``vidloader.demux``, ``.decode``, ``.convert``,
            ``.copy``, ``.finalize``, ``.collect``) for Nsight Systems, in each process where
            that work runs. Default ``None``: on when ``VIDLOADER_NVTX=1``. A no-op on a CPU
            build of torch; when off, no range is formatted or emitted.

    .. note:: The stream of batches is a pure function of (sampler seed, epoch, rank): the same
       whatever ``num_workers``. :meth:`state_dict` taken mid-epoch and loaded into a fresh
       loader continues the identical stream.
    """

    def __init__(
        self,
        index: VideoIndex,
        *,
        sampler: Sampler | None = None,
        batch_size: int = 128,
        size: tuple[int, int] | int | None = None,
        processing: Process | Mapping[str, Process] | None = None,
        labels: Sequence[int] | Mapping[str, int] | Callable[[str], int] | None = None,
        backend: Literal["cpu", "nvdec", "combo"] = "cpu",
        num_workers: int | None = None,
        prefetch: int = DEFAULT_PREFETCH_PER_WORKER,
        lookahead: int | None = None,
        pin_memory: bool = False,
        device: str | torch.device | None = None,
        on_error: Literal["raise", "skip"] = "raise",
        drop_last: bool = False,
        rank: int | None = None,
        world_size: int | None = None,
        persistent_workers: bool = False,
        decoder_threads: int = DEFAULT_DECODER_THREADS,
        nvdec_decoders: int | None = None,
        nvdec_options: Mapping[str, object] | None = None,
        fallback: Literal["cpu", "error"] = "cpu",
        combo_share: float | None = None,
        nvtx: bool | None = None,
        memory_budget: int | str | None = None,
        nvdec_processes: int = 1,
    ) -> None:
        if not isinstance(index, VideoIndex):
            raise ConfigError(f"index must be a vidloader.VideoIndex (from vidloader.build_index "
                              f"or VideoIndex.load), got {type(index).__name__}")
        if len(index) == 0:
            raise ConfigError("the index holds no readable videos" + _rejected_hint(index))
        if sampler is not None and not isinstance(sampler, Sampler):
            raise ConfigError(f"sampler must be a vidloader sampler (RandomFrames(), Clips(...), "
                              f"GopShuffle(), ...), got {sampler!r}")
        budget = check_options(
            batch_size=batch_size, prefetch=prefetch, on_error=on_error, backend=backend,
            lookahead=lookahead, fallback=fallback, combo_share=combo_share,
            num_workers=num_workers, pin_memory=pin_memory, drop_last=drop_last,
            persistent_workers=persistent_workers, decoder_threads=decoder_threads,
            nvdec_decoders=nvdec_decoders, nvdec_options=nvdec_options, nvtx=nvtx,
            memory_budget=memory_budget, nvdec_processes=nvdec_processes)
        device = resolve_device(device)
        self.index = index
        self.sampler = sampler if sampler is not None else RandomFrames()
        self.batch_size, self.drop_last = batch_size, drop_last
        self.labels = resolve_labels(index, labels)
        detected = detect_rank_world()
        self.rank = detected[0] if rank is None else rank
        self.world_size = detected[1] if world_size is None else world_size
        self._plan_cache: tuple | None = None  # (epoch, plan): one epoch's plan, reused
        self._epoch = self._next_batch = 0
        outputs = as_outputs(processing, size=size)
        rows_per_sample = self.sampler.rows_per_sample  # cameras of a rig fill a row each
        if num_workers is None or num_workers > 0:
            # The workers start at the first batch; the fork server they come from imports
            # PyAV and numpy meanwhile (once per program; no torch, in neither server), while
            # this constructor asks the driver about the GPU (CUDA's start-up: 0.5 s on the
            # H200) and the caller builds its model. After the cheap checks: a mistake found
            # so far starts no server. NVDEC's demux workers come from the demux server
            # (``make_pool``); the combo has workers of both kinds.
            servers = ("torch",) if nvdec_processes > 1 else _SERVERS_BY_BACKEND.get(backend, ("decode",))
            for server in servers:
                start_server(server)
        uses_nvdec = backend_uses_nvdec(backend)
        workers = _default_workers(backend, nvdec_processes) if num_workers is None else num_workers
        nv_options, units_decoding = (
            resolve_nvdec_options(index, device, nvdec_decoders, nvdec_options,
                                  work=self._decode_work(backend, _unit_workers(workers, nvdec_processes),
                                                         lookahead)
                                  if nvdec_decoders is None else None,
                                  processes=nvdec_processes)
            if uses_nvdec else ({}, DEFAULT_UNITS_DECODING)
        )
        #: Videos this GPU's NVDEC cannot decode, and why (empty with backend="cpu").
        self.nvdec_refusals: dict[int, str] = {}
        if uses_nvdec:  # the driver is asked here, so a machine without NVDEC fails now
            nv_options["caps"], self.nvdec_refusals = nvdec_routing(index, gpu=nv_options["device"])
        if uses_nvdec and fallback == "error" and self.nvdec_refusals:
            _refuse(index, self.nvdec_refusals)
        if backend == "combo" and device is None:  # batches meet on the GPU
            device = torch.device("cuda", nv_options["device"])
        self.config = LoaderConfig(
            index=index, outputs=outputs, backend=backend, on_error=on_error,
            batch_size=batch_size, rows_per_sample=rows_per_sample,
            shapes=staging_shapes(index, outputs, batch_size=batch_size,
                                  rows_per_sample=rows_per_sample,
                                  sequence_length=self._sequence_length()),
            num_workers=workers,
            prefetch=prefetch, lookahead=lookahead, persistent_workers=persistent_workers,
            cpu_options={"thread_count": decoder_threads}, nvdec_options=nv_options,
            units_decoding=units_decoding,
            device=device, pin_memory=pin_memory,
            cpu_only=cpu_only_mask(index, self.nvdec_refusals) if uses_nvdec and fallback == "cpu" else None,
            combo_share=None if combo_share is None else float(combo_share),
            nvtx=resolve_ranges(nvtx).enabled, memory_budget=budget,
            nvdec_processes=nvdec_processes,
            demux_ahead_bytes=demux_ahead_bytes(nvdec_options) if uses_nvdec else None,
        )
        if self.uses_block_units and has_row_affinity(self._epoch_plan(0)):
            self.config = _with_stream_files(self.config)
        self._sizes: VideoSizes | None = None  # for memory plans, computed once
        self._span: int | None = None  # GOPs of streams: a piece's most batches, computed once
        if uses_nvdec and budget is not None:
            self._fit_memory(memory_budget)
        self._pool: BatchPool | None = None
        self._scheduler: Scheduler | None = None
        self._collector = Collector(self.config)
        _LIVE_LOADERS.add(self)

    # -- the resolved options, by name -------------------------------------------------

    outputs = _from_config("outputs")
    backend = _from_config("backend")
    on_error = _from_config("on_error")
    num_workers = _from_config("num_workers")
    prefetch = _from_config("prefetch")
    persistent_workers = _from_config("persistent_workers")

    @property
    def stats(self) -> dict:
        """Batches, samples, skipped samples and files, the rows each executor filled, and
        (NVDEC in separation mode or the combo) ``gpu_staging``: the GPU staging buffers,
        how many were in use now and at most, and extra buffers made (``overflows``)."""
        return self._collector.stats

    @property
    def memory_plan(self) -> dict | None:
        """The NVDEC side's planned GPU memory (``None`` with ``backend="cpu"``): the
        settings (``decoders``, ``units_decoding``, ``stack_frames``, ``frame_cache_bytes``,
        ``gpu_staging_buffers`` of ``staging_slots``), bytes by component (staging, GOP
        stacks, conversion workspace, cuBLAS workspaces, frame cache, resize weights, decoder
        surfaces; with ``nvdec_processes``, ``processes`` and the workers' ``worker_contexts``)
        and ``total_bytes``; with ``memory_budget``, what it chose to fit."""
        plan = self._memory_plan()
        return None if plan is None else plan.as_dict()

    @property
    def decode_stats(self) -> DecodeStats:
        """Decode counters summed over every executor: seeks, packets, decoded, delivered."""
        return self._collector.decode_stats

    # -- set-up -------------------------------------------------------------------------

    def _sequence_length(self) -> int:
        if len(self) == 0:
            raise ConfigError(
                f"rank {self.rank} of {self.world_size} gets no batch of {self.batch_size} "
                f"from {self.sampler.num_samples(self.index)} samples; lower batch_size or "
                "set drop_last=False"
            )
        return self._epoch_plan(0).batch(0).sequence_length

    @property
    def lookahead(self) -> int:
        """Batches per unit of work: the argument, else, for GOPs of streams, the most batches
        one unit touches (``unit_stride + span - 1``), else the most batches one block of a
        GOP-local plan touches (each block is one unit), else the default."""
        if self.config.lookahead is not None:
            return self.config.lookahead
        if self.uses_stream_gops:
            return STREAM_GOP_STRIDE + self._stream_span - 1
        if self.uses_block_units:
            return max_unit_batches(self._epoch_plan(self._epoch))
        return DEFAULT_LOOKAHEAD_BATCHES

    @property
    def unit_stride(self) -> int:
        """Batches by which consecutive units' first batches advance: ``lookahead`` (units
        touch disjoint batches), but for GOPs of streams (:attr:`uses_stream_gops`), whose
        units overlap."""
        return STREAM_GOP_STRIDE if self.uses_stream_gops else self.lookahead

    @property
    def staging_slots(self) -> int:
        """Batches the loader can hold at once (decoded ahead, being decoded or, in
        separation mode, being demuxed): its staging slots, ``lookahead`` times the units in
        flight (for overlapping units, ``unit_stride`` times them plus what one unit reaches
        beyond its stride). See :attr:`gpu_staging_buffers` for how many hold GPU memory."""
        return self._slots_for(self._units_in_flight())

    def _slots_for(self, units: int) -> int:
        return batches_reached(units, self.lookahead, self.unit_stride)

    @property
    def gpu_staging_buffers(self) -> int:
        """Staging buffers on the GPU (0 with ``backend="cpu"``). NVDEC in the calling
        process fills units as they are handed out: one per slot. In separation mode a unit
        holds GPU buffers only from the start of its decoding to the delivery of its batches,
        and units decode in order, so ``lookahead × units_decoding`` buffers serve however
        many demux workers there are (overlapping units, GOPs of streams: ``unit_stride ×
        units_decoding + lookahead - unit_stride``); the combo's NVDEC side needs
        ``(lookahead + 1) × (units_decoding + 1)`` (see :mod:`._memory`)."""
        if not self.config.uses_nvdec:
            return 0
        return gpu_staging_buffers(self._pool_kind, self.staging_slots, self.lookahead,
                                   self.config.units_decoding, stride=self.unit_stride)

    @property
    def _pool_kind(self) -> str:
        """Where NVDEC decodes: ``"inline"`` (no workers), ``"separation"``, ``"combo"`` or
        ``"processes"`` (``nvdec_processes``)."""
        if self.config.backend == "combo":
            return "combo"
        if self.config.nvdec_processes > 1:
            return "processes"
        return "separation" if self.config.num_workers > 0 else "inline"

    @property
    def uses_block_units(self) -> bool:
        """Whether work is handed out one GOP-local block at a time (see ``lookahead``), or,
        for a plan of streams, one row over a few batches (CPU workers only: each keeps its
        rows' videos open; NVDEC with demux workers or in worker processes takes the GOPs of
        the streams instead, :attr:`uses_stream_gops`; otherwise whole batches)."""
        config = self.config
        return takes_block_units(self._epoch_plan(self._epoch), backend=config.backend,
                                 num_workers=self._unit_workers, lookahead=config.lookahead)

    @property
    def uses_stream_gops(self) -> bool:
        """Whether work is handed out as GOPs of streams (:func:`~._units.stream_gop_units`):
        a plan of streams on NVDEC with demux workers or ``nvdec_processes``, ``lookahead``
        not given. Each GOP a row walks through is then decoded once, whatever the batches it
        spans. (NVDEC with no workers keeps whole batches, and so does the combo. Worker
        processes take the GOPs although every slot of theirs is a GPU buffer too: their
        ``min(2, units_decoding) × K + prefetch - 1`` units in flight reach ``8 × that + span
        - 1`` batches, 19.5 GiB of slots with 4 processes on W3's native 1600×900, session 23.)"""
        config = self.config
        return takes_stream_gops(lambda: self._epoch_plan(self._epoch), backend=config.backend,
                                 num_workers=self._unit_workers, lookahead=config.lookahead)

    @property
    def _unit_workers(self) -> int:
        """``num_workers`` as the choice of units sees it (:func:`_unit_workers`)."""
        return _unit_workers(self.config.num_workers, self.config.nvdec_processes)

    @property
    def _stream_span(self) -> int:
        if self._span is None:
            self._span = stream_gop_span(self.index)
        return self._span

    def _units_in_flight(self, units_decoding: int | None = None) -> int:
        """Units the staging slots hold at once. Whole-batch units: one per worker plus the
        prefetch (NVDEC worker processes: ``units_per_process`` each, plus the prefetch,
        also for GOPs of streams, each of which goes whole to one process). Block units are
        large, and need no slot per worker: on CPU workers and NVDEC processes a block is
        shared by all of them (the scheduler cuts it by video), so ``prefetch + 1``; on the GPU
        in one process up to ``units_decoding`` (the config's, unless given) decode at once,
        plus the prefetch."""
        config = self.config
        decoding = config.units_decoding if units_decoding is None else units_decoding
        processes = config.nvdec_processes
        if self.uses_block_units or (self.uses_stream_gops and processes == 1):
            # A block is cut by video over CPU workers, or over NVDEC worker processes.
            return config.prefetch + (decoding if config.uses_nvdec and processes == 1 else 1)
        if processes > 1:  # a few units (GOPs of streams go whole) on each process, plus prefetch
            return units_per_process(decoding) * processes + config.prefetch - 1
        if config.backend == "combo":  # a unit per CPU worker and NVDEC's queue, plus prefetch
            return config.num_workers + decoding + config.prefetch - 1
        return max(1, config.num_workers) + config.prefetch - 1

    # -- GPU memory ---------------------------------------------------------------------

    def _plan_inputs(self) -> PlanInputs:
        """What a memory plan of this loader depends on, but the knobs a budget lowers."""
        config, lookahead = self.config, self.lookahead
        if self._sizes is None:
            self._sizes = VideoSizes.of(self.index, config.outputs)
        return PlanInputs(
            pool=self._pool_kind, lookahead=lookahead, stride=self.unit_stride,
            slots_for_units=lambda units: self._slots_for(self._units_in_flight(units)),
            slot_bytes=sum(math.prod(shape) for shape in config.shapes.values()),
            sizes=self._sizes, cublas_bytes=cublas_workspace_bytes(_capability(config.gpu)),
            processes=config.nvdec_processes,
        )

    def _memory_plan(self) -> MemoryPlan | None:
        config = self.config
        if not config.uses_nvdec:
            return None
        knobs = nvdec_knobs(config.nvdec_options, config.units_decoding)
        return make_plan(self._plan_inputs(), budget=config.memory_budget, **knobs)

    def _fit_memory(self, given) -> None:
        """Lower the NVDEC knobs until the plan fits ``memory_budget`` (``given``: the value
        passed, for the error), and keep them in the config."""
        config = self.config
        knobs = nvdec_knobs(config.nvdec_options, config.units_decoding)
        plan = fit_budget(self._plan_inputs(), config.memory_budget, given=given, **knobs)
        self.config = dataclasses.replace(
            config, units_decoding=plan.units_decoding,
            nvdec_options=apply_knobs(config.nvdec_options, plan))
        log.info("memory_budget=%r: planned %s", given, plan.summary())

    def _decode_work(self, backend: str, num_workers: int, lookahead: int | None) -> float | None:
        """Frames decoded per frame delivered in this epoch's first batches, for the automatic
        number of NVDEC decoders (``_config.decoded_per_delivered``), planned as the loader
        will hand the plan out (it reads the config, not made yet): GOP-local blocks unit by
        unit (:attr:`uses_block_units`), GOPs of streams each frame once
        (:attr:`uses_stream_gops`). ``None`` (each frame counted once) when the sampler
        cannot plan: the constructor's own planning (``_sequence_length``) raises that error
        a few lines on."""
        try:
            plan = self._epoch_plan(self._epoch)
        except VidloaderError:  # a mistake in the arguments, not in the estimate
            return None
        settings = dict(backend=backend, num_workers=num_workers, lookahead=lookahead)
        return decoded_per_delivered(plan, self.index, units=takes_block_units(plan, **settings),
                                     once=takes_stream_gops(lambda: plan, **settings))

    def _epoch_plan(self, epoch: int):
        cached = self._plan_cache
        if cached is None or cached[0] != epoch:
            plan = self.sampler.plan_epoch(
                self.index, epoch=epoch, batch_size=self.batch_size, rank=self.rank,
                world_size=self.world_size, drop_last=self.drop_last,
            )
            self._plan_cache = cached = (epoch, plan)
        return cached[1]

    def _start(self) -> None:
        gpu = self._pool_kind in ("separation", "combo") and self.config.uses_nvdec
        self._pool = make_pool(self.config, self.staging_slots,
                               gpu_buffers=self.gpu_staging_buffers if gpu else None,
                               counters=self.stats["gpu_staging"] if gpu else None)
        self._scheduler = Scheduler(self._pool, self.labels)

    # -- iteration ----------------------------------------------------------------------

    def __len__(self) -> int:
        """Batches per epoch for this rank (the same every epoch)."""
        return len(self._epoch_plan(self._epoch))

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        epoch, start = self._epoch, self._next_batch
        plan = self._epoch_plan(epoch)
        try:
            if self._pool is None:
                self._start()
            yield from self._run(plan, start)
        except GeneratorExit:  # the consumer broke out of its loop
            self._drain_or_close()
            raise
        except GpuMemoryError as exc:
            # Not a bad file: raised whatever on_error says. Everything is stopped and freed
            # first, and the frames of its traceback let go of the GPU memory they hold, so
            # a new iteration works once the caller has freed memory (even holding ``exc``).
            self._close_pool()
            release_frames(exc)
            raise
        except BaseException:
            self._close_pool()
            raise
        if not self.persistent_workers:
            self._close_pool()
        self._epoch, self._next_batch = epoch + 1, 0

    def _run(self, plan, start: int) -> Iterator[dict]:
        scheduler = self._scheduler
        units = (stream_gop_units(plan, self.index, start, span=self._stream_span)
                 if self.uses_stream_gops else None)
        for done in scheduler.run(plan, start, lookahead=self.lookahead, blocks=self.uses_block_units,
                                  units=units):
            batch = self._collector(done, self._pool)
            self._next_batch = scheduler.next_batch
            if batch is not None:
                yield batch

    def _drain_or_close(self) -> None:
        """After a ``break``: keep persistent workers (once their in-flight batches are
        received and dropped, so the next epoch starts clean), else stop them."""
        if not self.persistent_workers or self._pool is None:
            self._close_pool()
            return
        try:
            self._scheduler.drain()
        except BaseException:
            self._close_pool()
            raise

    # -- epochs and resume -------------------------------------------------------------

    def set_epoch(self, epoch: int) -> None:
        """Start the next iteration at the beginning of ``epoch`` (as DistributedSampler)."""
        self._epoch, self._next_batch = int(epoch), 0

    def state_dict(self) -> dict:
        """Where the stream stands: loading it into a fresh loader continues identically."""
        return {
            "epoch": self._epoch,
            "next_batch": self._next_batch,
            "sampler": self.sampler.config(),
            "batch_size": self.batch_size,
            "drop_last": self.drop_last,
            "rank": self.rank,
            "world_size": self.world_size,
        }

    def load_state_dict(self, state: dict) -> None:
        """Resume from :meth:`state_dict`; refuses a state from a different configuration."""
        mine = self.state_dict()
        for key in ("sampler", "batch_size", "drop_last", "rank", "world_size"):
            if state.get(key) != mine[key]:
                raise ConfigError(
                    f"cannot resume: state has {key}={state.get(key)!r} but this loader has "
                    f"{mine[key]!r}; build the loader with the same settings"
                )
        self._epoch, self._next_batch = int(state["epoch"]), int(state["next_batch"])

    # -- shutdown ----------------------------------------------------------------------

    def _close_pool(self) -> None:
        pool, self._pool, self._scheduler = self._pool, None, None
        if pool is not None:
            pool.shutdown()

    def shutdown(self) -> None:
        """Stop all workers and free shared memory. Safe to call more than once."""
        self._close_pool()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.shutdown()

    def __repr__(self) -> str:
        return (
            f"VideoLoader({len(self.index)} videos, {type(self.sampler).__name__}, "
            f"batch_size={self.batch_size}, outputs={list(self.outputs)}, "
            f"backend={self.backend!r}, num_workers={self.num_workers})"
        )


def _capability(gpu: torch.device) -> tuple[int, int] | None:
    """The GPU's compute capability (which sets cuBLAS's default workspace), if torch says."""
    try:
        return tuple(torch.cuda.get_device_capability(gpu.index or 0))
    except Exception:  # no driver here: the plan assumes the smaller workspace
        return None


#: The most files a CPU worker keeps open for a plan of streams (see :func:`_with_stream_files`).
MAX_STREAM_FILES = 64
#: Readers of one file a CPU worker keeps for a plan of streams (two runs of the separation
#: example's stream order can walk one clip at two places).
STREAM_READERS_PER_FILE = 2


def _with_stream_files(config: LoaderConfig) -> LoaderConfig:
    """``config`` with enough open files per CPU worker for its share of a plan of streams:
    the scheduler gives each worker the rows ``k, k + workers, …`` of every batch, and a
    worker that closes a row's video to open another's decodes it again from its keyframe.
    Up to two readers a file, for rows walking one video at two places."""
    rows = config.batch_size * config.rows_per_sample
    per_worker = math.ceil(rows / max(1, config.num_workers)) + 1  # + a row passing to a new video
    files = max(DEFAULT_MAX_OPEN_FILES, min(MAX_STREAM_FILES, per_worker))
    return dataclasses.replace(config, cpu_options={**config.cpu_options, "max_open_files": files,
                                                    "readers_per_file": STREAM_READERS_PER_FILE})


def _rejected_hint(index: VideoIndex) -> str:
    if not index.rejected:
        return ""
    first = index.rejected[0]
    return f" ({len(index.rejected)} rejected, e.g. {first.path}: {first.reason})"


def _refuse(index: VideoIndex, refusals: dict[int, str]) -> None:
    """``fallback="error"``: name the first file NVDEC cannot decode, and how many there are."""
    video, why = next(iter(refusals.items()))
    more = f" ({len(refusals) - 1} more files too)" if len(refusals) > 1 else ""
    raise UnsupportedCodecError(
        index[video].path, f"{why}{more}; with fallback='cpu' (the default) such files are "
        "decoded on the CPU instead")
