"""The loader's options, checked and resolved once into one frozen, picklable config.

``VideoLoader`` validates its arguments here and hands the result, a :class:`LoaderConfig`,
to everything below it: the scheduler, the pools, the worker processes (pickled once at
start) and the batch assembler. No option travels any other way, and none is compared to a
string literal outside this module: read ``config.skips_bad_files``, not ``on_error``.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Literal

import numpy as np

from .._utils._args import check_bool, check_choice, check_int, check_optional_int
from .._utils._nvtx import NVTX_ENV, Ranges
from ..constants import (
    DEFAULT_NVDEC_DECODERS,
    DEFAULT_STACK_FRAMES,
    MAX_DECODERS_PER_GPU,
    MIN_AUTO_NVDEC_DECODERS,
    MIN_PROCESS_NVDEC_DECODERS,
    PROCESS_DECODER_FACTOR,
)
from ..errors import BackendUnavailableError, ConfigError
from ..index import VideoIndex
from ..processing import Process, geometry
from ._memory import parse_memory_budget

if TYPE_CHECKING:
    import torch

Backend = Literal["cpu", "nvdec", "combo"]
OnError = Literal["raise", "skip"]
Fallback = Literal["cpu", "error"]
BACKENDS: tuple[str, ...] = ("cpu", "nvdec", "combo")
ON_ERROR: tuple[str, ...] = ("raise", "skip")
FALLBACKS: tuple[str, ...] = ("cpu", "error")

#: Packet bytes demuxed ahead of NVDEC (sent to the demux workers or received, not yet
#: decoding) by default: ``nvdec_options["demux_ahead_bytes"]`` (:class:`~._pool.DemuxAhead`).
#: Bounded by the worker count alone (a unit each, plus the prefetch), W1's uniform random
#: frames (1080p, ~0.25 GB of packets a unit of 128 frames, 16 workers) held 4.0-4.6 GiB in
#: segments sent but not yet received, on top of 3.1-3.3 GiB in the processes; bounded at
#: 2 GiB / 1 GiB / 512 MiB / 256 MiB, 3.86 / 2.90-3.06 / 2.38 / 2.23 GiB in all, at the same
#: pace (304-314 frames/s; H100, ``session20-3``).
DEFAULT_DEMUX_AHEAD_BYTES = 512 << 20

#: Units queued on the NVDEC decoders at once, by default: the next ones decode while the
#: oldest is waited for, so the decoders never drain between units.
DEFAULT_UNITS_DECODING = 4


@dataclasses.dataclass(frozen=True)
class LoaderConfig:
    """Everything below the loader's front needs, resolved once.

    Attributes:
        index: the videos.
        outputs: ``{name: Process}``, the named outputs made from each decoded frame.
        backend: ``"cpu"`` or ``"nvdec"``.
        on_error: ``"raise"`` or ``"skip"`` (read :attr:`skips_bad_files`).
        batch_size: samples per batch.
        rows_per_sample: staging rows each sample fills (cameras of a rig; else 1).
        shapes: each output's staging shape, ``(rows, T, H, W, 3)``.
        num_workers: worker processes (0: everything in the calling process).
        prefetch: units in flight beyond one per worker.
        lookahead: batches per unit of work, or ``None`` to take it from the epoch plan.
        persistent_workers: keep the workers between epochs.
        cpu_options: :class:`~vidloader.decoding.CpuExecutor` options.
        nvdec_options: :class:`~vidloader.decoding.nvdec.NvdecExecutor` options (the GPU
            index under ``"device"``).
        units_decoding: units queued on the NVDEC decoders at once.
        device, pin_memory: where batches are delivered.
        cpu_only: with ``"nvdec"``/``"combo"``, True for each video NVDEC cannot decode
            (decoded on the CPU instead); ``None`` with ``"cpu"``.
        combo_share: with ``"combo"``, a fixed share of units for NVDEC (the seed's static
            split, for comparison); ``None``: each executor takes units as it frees up.
        nvtx: emit NVTX ranges (demux, decode, convert, copy, finalize) in every process
            that does the work; resolved from the ``nvtx`` argument or ``VIDLOADER_NVTX``,
            and False on a CPU build of torch.
        memory_budget: the GPU bytes the NVDEC side was planned to fit (``None``: no
            budget); ``units_decoding`` and ``nvdec_options`` hold what it chose
            (:mod:`._memory`).
        nvdec_processes: NVDEC worker processes (1: NVDEC in this process).
        demux_ahead_bytes: packet bytes the demux workers may hold ahead of NVDEC
            (``nvdec_options["demux_ahead_bytes"]``; ``None``: every unit submitted is sent
            at once, bounded by the staging slots alone).
    """

    index: VideoIndex
    outputs: dict[str, Process]
    backend: Backend
    on_error: OnError
    batch_size: int
    rows_per_sample: int
    shapes: dict[str, tuple]
    num_workers: int
    prefetch: int
    lookahead: int | None
    persistent_workers: bool
    cpu_options: dict
    nvdec_options: dict
    units_decoding: int
    device: torch.device | None
    pin_memory: bool
    cpu_only: np.ndarray | None = None
    combo_share: float | None = None
    nvtx: bool = False
    memory_budget: int | None = None
    nvdec_processes: int = 1
    demux_ahead_bytes: int | None = None

    @property
    def uses_nvdec(self) -> bool:
        return backend_uses_nvdec(self.backend)

    @property
    def skips_bad_files(self) -> bool:
        """Whether a bad file's samples are dropped (``on_error="skip"``) instead of raising."""
        return self.on_error == "skip"

    @property
    def ranges(self) -> Ranges:
        """The NVTX ranges of this loader (a no-op unless :attr:`nvtx`)."""
        return Ranges(self.nvtx)

    @property
    def gpu(self) -> torch.device:
        """The GPU NVDEC decodes on."""
        import torch

        return torch.device("cuda", self.nvdec_options["device"])

    def executor_options(self, backend: str) -> dict:
        """The constructor options of ``backend``'s executor."""
        return {**(self.cpu_options if backend == "cpu" else self.nvdec_options), "nvtx": self.nvtx}


def backend_uses_nvdec(backend: str) -> bool:
    """Whether ``backend`` decodes on NVDEC (alone or beside the CPU)."""
    return backend in ("nvdec", "combo")


#: The keys ``nvdec_options`` may hold: ``NvdecExecutor`` options the loader does not set
#: itself, ``units_decoding`` and ``demux_ahead_bytes``.
NVDEC_OPTION_KEYS = ("demux_ahead_bytes", "frame_cache_bytes", "packet_cache_bytes", "skip_nonref",
                     "stack_frames", "units_decoding")


def check_options(*, batch_size, prefetch, on_error, backend, lookahead, fallback="cpu",
                  combo_share=None, num_workers=None, pin_memory=False, drop_last=False,
                  persistent_workers=False, decoder_threads=1, nvdec_decoders=1,
                  nvdec_options=None, nvtx=None, memory_budget=None,
                  nvdec_processes=1) -> int | None:
    """The checks that need nothing but the arguments: types, ranges and choices, each a
    :class:`ConfigError` naming the argument, the value and the fix. Returns
    ``memory_budget`` in bytes (whether it fits is checked once the loader is planned)."""
    check_int("batch_size", batch_size, minimum=1, fix="the samples per batch")
    check_optional_int("num_workers", num_workers, minimum=0,
                       fix="worker processes; 0 decodes in this process, None one per core")
    check_int("prefetch", prefetch, minimum=1, fix="units of work in flight beyond one per worker")
    check_optional_int("lookahead", lookahead, minimum=1,
                       fix="consecutive batches planned together; None for the sampler's choice")
    check_int("decoder_threads", decoder_threads, minimum=0, fix="FFmpeg threads per decode; 0 lets FFmpeg decide")
    if nvdec_decoders is not None and not 1 <= check_int("nvdec_decoders", nvdec_decoders) <= MAX_DECODERS_PER_GPU:
        raise ConfigError(f"nvdec_decoders must be in 1..{MAX_DECODERS_PER_GPU} (decoder threads "
                          f"per GPU), or None to pick them by NVDEC's work per frame; got "
                          f"{nvdec_decoders}")
    for name, value in (("pin_memory", pin_memory), ("drop_last", drop_last),
                        ("persistent_workers", persistent_workers)):
        check_bool(name, value)
    check_choice("on_error", on_error, ON_ERROR, fix="'raise' stops at a bad file, 'skip' drops its samples")
    check_choice("backend", backend, BACKENDS)
    check_choice("fallback", fallback, FALLBACKS,
                 fix="'cpu': files NVDEC cannot decode go to the CPU; 'error' refuses them")
    _check_nvdec_options(nvdec_options)
    if combo_share is not None and (backend != "combo" or isinstance(combo_share, (bool, str))
                                    or not 0.0 <= float(combo_share) <= 1.0):
        raise ConfigError(f"combo_share must be a number in [0, 1] with backend='combo' (the "
                          f"share of units NVDEC takes), got {combo_share!r} with backend={backend!r}")
    if nvtx is not None and not isinstance(nvtx, bool):
        raise ConfigError(f"nvtx must be True, False or None (None: the {NVTX_ENV} environment "
                          f"variable decides), got {nvtx!r}")
    _check_nvdec_processes(nvdec_processes, backend=backend)
    budget = parse_memory_budget(memory_budget)
    if budget is not None and not backend_uses_nvdec(backend):
        raise ConfigError(f"memory_budget={memory_budget!r} bounds the GPU memory of NVDEC "
                          f"decoding, but backend={backend!r}; use backend='nvdec' or 'combo', "
                          "or leave memory_budget=None")
    return budget


#: The most NVDEC worker processes on one GPU (``nvdec_processes``): each holds a CUDA context,
#: torch and its own decoders.
MAX_NVDEC_PROCESSES = 16


def _check_nvdec_processes(processes, *, backend) -> None:
    check_int("nvdec_processes", processes, minimum=1,
              fix="processes that demux and decode on NVDEC; 1 decodes in the loader's process")
    if processes == 1:
        return
    if processes > MAX_NVDEC_PROCESSES:
        raise ConfigError(f"nvdec_processes must be in 1..{MAX_NVDEC_PROCESSES} (each holds a "
                          f"CUDA context and its decoders), got {processes}")
    if backend != "nvdec":
        raise ConfigError(f"nvdec_processes={processes} decodes in NVDEC worker processes, but "
                          f"backend={backend!r}; use backend='nvdec', or leave nvdec_processes=1")


def _check_nvdec_options(options) -> None:
    if options is None:
        return
    if not isinstance(options, Mapping):
        raise ConfigError(f"nvdec_options must be a dict, got {options!r} ({type(options).__name__})")
    unknown = sorted(set(options) - set(NVDEC_OPTION_KEYS), key=str)
    if unknown:
        raise ConfigError(f"nvdec_options has unknown keys {unknown}; the known ones are "
                          f"{', '.join(NVDEC_OPTION_KEYS)}")


def resolve_device(device) -> torch.device | None:
    """``device`` as a ``torch.device``, checked here rather than at the first batch: a GPU
    that is not there is a :class:`BackendUnavailableError`, not torch's ``AssertionError``.

    ``torch.cuda.is_available`` and ``device_count`` initialise no CUDA context, and workers
    are forks of the fork server anyway, never of this process.
    """
    if device is None:
        return None
    import torch  # here, not at the top: CPU workers unpickle this module and never load torch

    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        raise ConfigError(f"device must be 'cpu', 'cuda', 'cuda:N' or a torch.device, got {device!r}") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise BackendUnavailableError(
                f"device={device!r} needs a CUDA GPU, but none is visible to torch "
                f"(torch {torch.__version__}, torch.cuda.is_available() is False); "
                "leave device=None (batches on the CPU) or install a CUDA build of torch")
        count = torch.cuda.device_count()
        if dev.index is not None and dev.index >= count:
            raise ConfigError(f"device={device!r}: this machine has {count} CUDA GPU(s), "
                              f"cuda:0..cuda:{count - 1}")
    elif dev.type != "cpu":
        raise ConfigError(f"device must be 'cpu' or a CUDA device, got {device!r}")
    return dev


def staging_shapes(index: VideoIndex, outputs: Mapping[str, Process], *, batch_size: int,
                   rows_per_sample: int, sequence_length: int) -> dict[str, tuple]:
    """Each output's staging shape; ConfigError when videos of different sizes would have to
    share a batch without a common output size."""
    shapes = {}
    for name, proc in outputs.items():
        sizes = set()
        for rec in _distinct_sizes(index):
            sizes.add(geometry(proc, rec.height, rec.width, rotation=rec.rotation, path=rec.path).out_hw)
        if len(sizes) > 1:
            raise ConfigError(
                f"output {name!r}: videos have different sizes {sorted(sizes)[:4]}, so "
                "frames cannot share a batch; give size=(height, width)"
            )
        (h, w), t = sizes.pop(), proc.frames_out(sequence_length)
        shapes[name] = (batch_size * rows_per_sample, t, h, w, 3)
    return shapes


#: Pixels of a 1080p frame: :func:`auto_nvdec_decoders` gives frames this large or larger the
#: most decoder threads.
FULL_HD_PIXELS = 1920 * 1080


def auto_nvdec_decoders(index: VideoIndex, decoded: float | None = None, *,
                        processes: int = 1) -> int:
    """Decoder threads for ``nvdec_decoders=None``: :data:`~vidloader.constants.
    DEFAULT_NVDEC_DECODERS` (16) where NVDEC's work per delivered frame is a 1080p frame's or
    more, fewer in proportion below it, never fewer than
    :data:`~vidloader.constants.MIN_AUTO_NVDEC_DECODERS` (4); a decoder thread's Python work
    under the GIL follows the delivered frames alone (constants.py gives the measurements).

    NVDEC's work per delivered frame: a frame's mean pixels, each video weighted by its frames
    (a sampler taking one clip per video weighs long videos more than it draws them), times
    ``decoded``, the frames decoded per delivered one (:func:`decoded_per_delivered`; ``None``:
    1). The pixels come from the whole index, not from the first batches, whose frames in
    stream order are the first videos'. 1080p: 16; 1600×900 in stream order: 11; half 720p,
    half 340p, each clip from its keyframe: 4; the same with random clips in GOPs of 250
    (about 10 decoded per delivered): 16.

    ``processes``: with ``nvdec_processes`` > 1, the threads of each process: ``ceil(
    PROCESS_DECODER_FACTOR × one process's choice / processes)``, between
    :data:`~vidloader.constants.MIN_PROCESS_NVDEC_DECODERS` and one process's choice (4
    processes: 1080p 8 each, 1600×900 in stream order 6; 12 processes of small frames: 2)."""
    frames = np.array([max(1, r.num_frames) for r in index], dtype=np.float64)
    pixels = np.array([r.width * r.height for r in index], dtype=np.float64)
    work = float((pixels * frames).sum() / frames.sum()) / FULL_HD_PIXELS
    work *= max(1.0, decoded or 1.0)
    one = int(min(DEFAULT_NVDEC_DECODERS, max(MIN_AUTO_NVDEC_DECODERS,
                                              round(DEFAULT_NVDEC_DECODERS * work))))
    if processes <= 1:
        return one
    shared = math.ceil(PROCESS_DECODER_FACTOR * one / processes)
    return min(one, max(MIN_PROCESS_NVDEC_DECODERS, shared))


#: Batches of the first epoch's plan :func:`decoded_per_delivered` looks at.
ESTIMATE_BATCHES = 8


def decoded_per_delivered(plan, index: VideoIndex, *, units: bool = False,
                          once: bool = False) -> float | None:
    """Frames NVDEC decodes per frame delivered in the first batches of ``plan`` (from each
    GOP's keyframe to its last wanted frame, without skipping non-reference frames: an upper
    bound), or ``None`` for an empty plan; 1.0 with ``once`` (GOPs of streams decode each
    frame once).

    ``units``: the loader hands out the plan's own decode units (GopShuffle's GOP-local
    blocks), so each unit starting in those batches is planned as one, as a worker plans it;
    planned as whole batches, a block's GOPs would count from their keyframes for the few
    frames the first batches take (GopShuffle on GOPs of 250: 28 decoded per delivered,
    against 1)."""
    if once:
        return 1.0
    from ..planning import estimated_decode_cost, plan_tasks

    cost = wanted = 0
    for parts in _first_units(plan) if units else [_first_batches(plan)]:
        for task in plan_tasks(parts, index) if parts else ():
            cost += estimated_decode_cost(task)
            wanted += sum(len(g.frames) for g in task.gops)
    return cost / wanted if wanted else None


def _first_batches(plan) -> list:
    return [plan.batch(b) for b in range(min(ESTIMATE_BATCHES, len(plan)))]


def _first_units(plan):
    """The parts (row slices of batches) of each decode unit of ``plan`` that starts in its
    first :data:`ESTIMATE_BATCHES` batches; units come in stream order."""
    batches: dict[int, object] = {}  # a block's batches serve several of its units

    def batch(b: int):
        if b not in batches:
            batches[b] = plan.batch(b)
        return batches[b]

    for unit in plan.decode_units():
        if unit and unit[0][0] >= ESTIMATE_BATCHES:
            return
        yield [batch(b).rows(s, e) for b, s, e in unit]


def resolve_nvdec_options(index: VideoIndex, device, decoders: int | None,
                          extra: Mapping | None, *, work: float | None = None,
                          processes: int = 1) -> tuple[dict, int]:
    """NVDEC executor options (the GPU, and decoder size limits that fit every video, so one
    decoder per codec is reconfigured, never recreated) and the units to queue at once.
    ``decoders`` was checked by :func:`check_options` (here, not on first use in the GPU
    process, where it would surface only after the workers started)."""
    if device is not None and device.type == "cuda":
        gpu = device.index or 0
    else:
        gpu = int(os.environ.get("LOCAL_RANK", "0"))
    extra = dict(extra or {})
    extra.pop("demux_ahead_bytes", None)  # the demux workers', read by demux_ahead_bytes()
    units = extra.pop("units_decoding", DEFAULT_UNITS_DECODING)
    if isinstance(units, bool) or not isinstance(units, int) or units < 1:
        raise ConfigError(f"nvdec_options['units_decoding'] must be an int >= 1 (units queued on "
                          f"the decoders at once), got {units!r}")
    stack = extra.get("stack_frames", DEFAULT_STACK_FRAMES)
    if isinstance(stack, bool) or not isinstance(stack, int) or stack < 1:
        raise ConfigError(f"nvdec_options['stack_frames'] must be an int >= 1 (decoded frames a "
                          f"decoder thread holds before converting them; default "
                          f"{DEFAULT_STACK_FRAMES}), got {stack!r}")
    options = {
        "device": gpu,
        "max_width": max(r.width for r in index),
        "max_height": max(r.height for r in index),
        "num_decoders": (auto_nvdec_decoders(index, work, processes=processes)
                         if decoders is None else decoders),
        **extra,
    }
    return options, units


def demux_ahead_bytes(extra: Mapping | None) -> int | None:
    """``nvdec_options["demux_ahead_bytes"]``: bytes (an int, or a string such as
    ``"512MiB"``), ``None`` for no bound, or the default (:data:`DEFAULT_DEMUX_AHEAD_BYTES`)."""
    extra = extra or {}
    if "demux_ahead_bytes" not in extra:
        return DEFAULT_DEMUX_AHEAD_BYTES
    value = extra["demux_ahead_bytes"]
    if value is None:
        return None
    try:
        return parse_memory_budget(value)
    except ConfigError:
        raise ConfigError(f"nvdec_options['demux_ahead_bytes'] must be bytes (an int >= 1, or a "
                          f"string such as '512MiB' or '2GB') or None for no bound, got "
                          f"{value!r}") from None


def _distinct_sizes(index: VideoIndex):
    seen = {}
    for rec in index:
        seen.setdefault((rec.height, rec.width, rec.rotation), rec)  # rotation: see autorotate
    return list(seen.values())
