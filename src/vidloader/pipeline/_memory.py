"""What the NVDEC loader holds on the GPU, planned: ``memory_budget`` and ``loader.memory_plan``.

The loader's GPU memory is the sum of (per decoder thread, ``d`` of them):

- **staging buffers**: one batch of uint8 outputs each (``(rows, T, H, W, 3)`` per output).
  The scheduler's slots number ``lookahead × units in flight``, and in separation mode a
  unit being demuxed holds none: a slot is bound to a GPU buffer only when a unit that fills
  it starts decoding, and unbound when its batch is delivered
  (:class:`~._pool.StagingBuffers`). So the buffers are ``lookahead × units_decoding`` with
  NVDEC alone (units decode in order and a new one starts only once the delivered ones gave
  theirs back), and ``(lookahead + 1) × (units_decoding + 1)`` in the combo (its NVDEC units
  gather rows across a batch boundary, and may finish before the CPU rows of an earlier
  batch: one unit's worth of room to run ahead). Units that overlap (the GOPs of a plan of
  streams begin ``stride`` batches apart and each reaches ``lookahead``) need
  ``stride × units_decoding + lookahead - stride``;
- **GOP stacks**: decoded NV12/P016 pictures waiting for their conversion, at most
  ``stack_frames`` per decoder thread (``nvdec_options["stack_frames"]``, 16 by default);
- **conversion workspace**: the float intermediates of converting a stack to RGB
  (:func:`~vidloader.processing._nv12.conversion_bytes`), which PyTorch's caching allocator
  keeps per CUDA stream, i.e. per decoder thread, rounded up to its 20 MiB segments;
- **cuBLAS workspaces**: the conversion multiplies matrices, and cuBLAS keeps a workspace
  per (thread, stream) for the life of the process: 32 MiB on Hopper (compute capability 9),
  8.125 MiB before, or what ``CUBLAS_WORKSPACE_CONFIG`` says. On the H100 the 16 decoder
  threads' workspaces were the 0.5 GiB still allocated after the loop, listed under
  ``_resample.py``'s matrix product (the allocation that created them);
- **the frame cache** (``nvdec_options["frame_cache_bytes"]``, off by default);
- **decoder surfaces**: NVDEC's own (outside PyTorch, seen by ``nvidia-smi`` only), about
  :data:`DECODER_SURFACE_FRAMES` pitched pictures per decoder.

The CUDA context (about 0.5 GiB) and the batch handed to the caller are not the loader's.

With ``nvdec_processes=K`` (pool ``"processes"``) the staging buffers are the scheduler's slots,
allocated once in the loader's process and shared with the workers; the decoder threads'
parts and the resize filters are each worker's, so they count ``K`` times; and each worker's
own CUDA context with what torch keeps beside the plan is the loader's
(:data:`WORKER_CONTEXT_BYTES` each). Each worker queues ``min(2, units_decoding)`` units
(``_nvdec_workers.UNITS_PER_PROCESS``), so lowering ``units_decoding`` to 1 frees slots there
(not with GOP-local blocks, which are cut over the workers whatever ``units_decoding`` is; a
budget step that frees nothing is skipped).

``memory_budget`` lowers, in :data:`BUDGET_STEPS` order, the frame cache, the decoder
threads, the stack frames and the units decoding until the plan fits in
:data:`BUDGET_FILL` of the budget; if even one of each does not, the loader refuses at
construction, naming the least budget that fits.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from collections.abc import Callable

from ..constants import DEFAULT_STACK_FRAMES
from ..errors import ConfigError
from ..index import VideoIndex
from ..processing import Process, geometry

MIB = 1 << 20
GIB = 1 << 30

#: NVDEC surfaces per decoder, in pitched pictures of the largest video: decode surfaces
#: (the stream's DPB and a few more), the output surfaces of one ``Decode`` call (up to
#: ``FEED_PACKETS`` = 16) and the binding's own frame buffers. Measured on the H100
#: (``session10-6``, ``gpu_memory_probe.py``): outside PyTorch and the CUDA context, 2.61 GiB
#: for 16 decoders of 1080p H.264, 167 MiB or 52 pitched pictures each (session 9's first
#: estimate, 24, came from nvidia-smi minus PyTorch's reserve, with the context guessed). On
#: the H200 (``session17-4``, 8 and 12 decoders) 176-179 MiB each: 56 pictures, so that a
#: budget's plan does not fall short of what ``nvidia-smi`` sees.
DECODER_SURFACE_FRAMES = 56
#: Row pitch NVDEC's surfaces are allocated with (bytes; widths round up to it).
SURFACE_PITCH = 256

#: cuBLAS's workspace per (thread handle, stream) by default, as PyTorch sets it: 32 MiB
#: on compute capability 9.x (Hopper), else ``4096 KiB × 2 + 16 KiB × 8``.
CUBLAS_WORKSPACE_HOPPER = 32 * MIB
CUBLAS_WORKSPACE_OTHER = 4096 * 1024 * 2 + 16 * 1024 * 8

#: PyTorch's caching allocator carves allocations between 1 and 10 MiB out of 20 MiB
#: segments and rounds larger ones to 2 MiB, per stream; small ones (< 1 MiB) come from 2 MiB
#: segments. A decoder stream's stack and conversion reserve is rounded up to whole
#: segments, plus one small segment.
ALLOCATOR_SEGMENT = 20 * MIB
ALLOCATOR_SMALL_SEGMENT = 2 * MIB

#: GPU memory an NVDEC worker process holds beside its planned parts (``nvdec_processes`` > 1):
#: its CUDA context and what torch keeps outside the decoder threads' streams. Measured on the
#: H100 (``session23-2``, W3 in 4 processes): ``nvidia-smi`` at peak less the staging slots
#: and the decoder threads' parts (fitted over 2-16 threads a process) left 3.8-4.2 GiB for the
#: loader's process and 4 workers, 0.7-0.9 GiB a worker after the loader's own context. On W1
#: (1080p to 224², the same call) plans of 4 processes stood 19-22% above ``nvidia-smi``
#: (17.7 against 14.9 GiB with 8 threads a process, 31.1 against 25.4 with 16): the gap grows
#: with the threads, so a worker's threads hold less than planned there (to recheck).
WORKER_CONTEXT_BYTES = 900 * MIB

#: What ``memory_budget`` lowers, in order, until the plan fits: (knob, value). The cheapest
#: trades first: a smaller frame cache where one was asked for (fewer repeats served without
#: decoding), decoder threads down to 8, stacks of 8, no frame cache, smaller conversion
#: stacks (more launches per GOP), fewer
#: units queued (the decoders may drain between units), then the rest of the decoders and
#: the smallest stacks and queues. Decoders go early because each costs ~176 MiB of NVDEC
#: surfaces at 1080p while 8 threads decode as fast as 12 or 16: their Python work contends
#: for the GIL (``session17-4``, sequential W1 on the H200 at about 3 GiB: 8 decoders, 2 units,
#: stacks of 4 gave 1,725 frames/s in 2.37 GiB; 12 decoders with 1 or 2 units and stacks of 2
#: or 4, 1,049-1,528 in 3.0-3.4 GiB; the default 16, 1,759-2,079 in 7.1 GiB).
BUDGET_STEPS: tuple[tuple[str, int], ...] = (
    ("frame_cache_bytes", 64 * MIB), *(("decoders", d) for d in range(15, 7, -1)),
    ("stack_frames", 8), ("frame_cache_bytes", 0), ("stack_frames", 4), ("units_decoding", 2),
    *(("decoders", d) for d in range(7, 3, -1)), ("stack_frames", 2), ("units_decoding", 1),
    *(("decoders", d) for d in range(3, 0, -1)), ("stack_frames", 1),
)

#: Share of ``memory_budget`` a plan may fill: the rest covers what the plan does not see
#: (allocator rounding and fragmentation per stream, the binding's own buffers). Plans fell
#: 5-8% short of ``nvidia-smi`` above the CUDA context on the H200 (``session17-4``:
#: 2.87 → 3.01, 2.94 → 3.09, 3.11 → 3.34, 3.18 → 3.42, 2.17 → 2.37 GiB), before the surfaces'
#: estimate was raised to 56 pictures.
BUDGET_FILL = 0.92

_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "m": 1000**2, "mb": 1000**2, "g": 1000**3,
          "gb": 1000**3, "t": 1000**4, "tb": 1000**4, "kib": 1 << 10, "mib": 1 << 20,
          "gib": 1 << 30, "tib": 1 << 40}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-zA-Z]*)\s*$")
_BUDGET_FIX = ("bytes as an int, or a string such as '3GiB', '512MiB' or '2.5GB' (KiB/MiB/GiB "
               "are powers of 1024, KB/MB/GB of 1000); None plans for speed alone")


def parse_memory_budget(value: object) -> int | None:
    """``memory_budget`` in bytes (``None`` stays ``None``).

    Raises:
        ConfigError: not a positive int or a size string, naming the value and the forms.
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ConfigError(f"memory_budget must be {_BUDGET_FIX}; got {value!r} ({type(value).__name__})")
    if isinstance(value, int):
        n = value
    else:
        match = _SIZE.match(value)
        unit = match.group(2).lower() if match else None
        if unit not in _UNITS:
            raise ConfigError(f"memory_budget must be {_BUDGET_FIX}; got {value!r}")
        n = int(float(match.group(1)) * _UNITS[unit])
    if n <= 0:
        raise ConfigError(f"memory_budget must be more than 0 bytes, got {value!r}; {_BUDGET_FIX}")
    return n


def describe(n: int) -> str:
    """Bytes for a message or report: GiB from 1 GiB up, else MiB."""
    return f"{n / GIB:.2f} GiB" if n >= GIB else f"{n / MIB:.1f} MiB"


def cublas_workspace_bytes(capability: tuple[int, int] | None) -> int:
    """The cuBLAS workspace PyTorch gives each (thread, stream) on a GPU of ``capability``:
    the sum of ``CUBLAS_WORKSPACE_CONFIG``'s ``:KiB:count`` pairs when set, else its default."""
    config = os.environ.get("CUBLAS_WORKSPACE_CONFIG", "")
    pairs = re.findall(r":(\d+):(\d+)", config)
    if pairs:
        return sum(int(kib) * 1024 * int(count) for kib, count in pairs)
    return CUBLAS_WORKSPACE_HOPPER if capability and capability[0] >= 9 else CUBLAS_WORKSPACE_OTHER


@dataclasses.dataclass(frozen=True)
class VideoSizes:
    """What the plan needs of the index and the outputs, computed once.

    Attributes:
        frame_bytes: the largest compact NV12/P016 picture (a GOP stack's row).
        surface_bytes: the largest pitched picture (an NVDEC surface).
        conversion_bytes: per picture, the most any video's conversion to its outputs'
            sizes allocates (outputs convert one after another; their uint8 results add).
        weight_bytes: the cached float32 resize filters, every (video size, output size).
        max_gop_frames: the longest GOP of the index (a stack holds no more).
    """

    frame_bytes: int
    surface_bytes: int
    conversion_bytes: int
    weight_bytes: int
    max_gop_frames: int

    @classmethod
    def of(cls, index: VideoIndex, outputs: dict[str, Process]) -> VideoSizes:
        # Here, not at the top: ``_nv12`` is torch's, and the loader's config (which CPU
        # workers unpickle without loading torch) imports this module for its budget parser.
        from ..processing._nv12 import conversion_bytes, nv12_rows

        frame = surface = conversion = weights = 0
        kinds = {}
        for rec in index:  # one record per picture size, depth and rotation
            kinds.setdefault((rec.height, rec.width, rec.bit_depth > 8, rec.rotation), rec)
        for (h, w, deep, _), rec in kinds.items():
            rows, sample = nv12_rows(h), 2 if deep else 1
            frame = max(frame, rows * w * sample)
            surface = max(surface, rows * math.ceil(w * sample / SURFACE_PITCH) * SURFACE_PITCH)
            sizes = {geometry(p, h, w, rotation=rec.rotation, path=rec.path).coded_hw
                     for p in outputs.values()}
            results = sum(3 * oh * ow for oh, ow in sizes)
            conversion = max(conversion, results + max(conversion_bytes(h, w, s, deep=deep)
                                                       for s in sizes))
            weights += sum(4 * (ow * w + oh * h) * 3 // 2 for oh, ow in sizes if (oh, ow) != (h, w))
        return cls(frame, surface, conversion, weights, max_gop_frames(index))


def max_gop_frames(index: VideoIndex) -> int:
    """The longest GOP of ``index``, in frames (1 for an index without frames)."""
    return max((int(rec.gop_lengths.max()) for rec in index if rec.num_frames), default=1)


def batches_reached(units: int, lookahead: int, stride: int | None = None) -> int:
    """Batches ``units`` consecutive units touch, each reaching ``lookahead`` batches and
    beginning ``stride`` batches after the one before (default ``lookahead``: disjoint units,
    ``units × lookahead``; overlapping units, GOPs of streams: ``stride × units + lookahead -
    stride``). The loader's staging slots and separation mode's GPU buffers are both this."""
    stride = lookahead if stride is None else min(stride, lookahead)
    return stride * units + lookahead - stride


def gpu_staging_buffers(kind: str, slots: int, lookahead: int, units_decoding: int, *,
                        stride: int | None = None) -> int:
    """GPU staging buffers for ``slots`` scheduler slots (see the module docstring).

    ``kind``: ``"inline"`` (NVDEC in the calling process: units are filled as they are
    handed out, so every slot is a buffer; ``"processes"`` likewise), ``"separation"`` or
    ``"combo"``. ``stride``:
    batches by which consecutive units' first batches advance, when units overlap (GOPs of
    streams, :func:`~._units.stream_gop_units`; default ``lookahead``, disjoint units): the
    units decoding then reach :func:`batches_reached` of them.
    """
    if kind == "separation":
        need = batches_reached(units_decoding, lookahead, stride)
    elif kind == "combo":
        need = (lookahead + 1) * (units_decoding + 1)
    else:
        need = slots
    return max(1, min(slots, need))


@dataclasses.dataclass(frozen=True)
class MemoryPlan:
    """The loader's planned GPU memory (bytes), and the settings it was planned with.

    ``loader.memory_plan`` holds it; :meth:`as_dict` is what the bench JSON and
    ``benchmarks/diag/gpu_memory_probe.py`` record.
    """

    budget: int | None
    pool: str  # "inline", "separation", "combo" or "processes"
    staging_slots: int  # the scheduler's slots (batches in flight, demuxing included)
    gpu_staging_buffers: int  # of them, buffers on the GPU
    slot_bytes: int
    decoders: int
    units_decoding: int
    stack_frames: int
    frame_cache_bytes: int
    sizes: VideoSizes
    cublas_bytes: int  # per decoder thread
    processes: int = 1  # NVDEC worker processes, ``decoders`` threads each (1: the loader's own)

    @property
    def stack_bytes(self) -> int:
        """A decoder thread's GOP stack at its largest."""
        return self.frames_per_stack * self.sizes.frame_bytes

    @property
    def frames_per_stack(self) -> int:
        return min(self.stack_frames, self.sizes.max_gop_frames)

    @property
    def stream_reserve_bytes(self) -> int:
        """A decoder stream's stack and conversion high-water mark, as the caching allocator
        keeps it (rounded up to whole segments)."""
        work = self.stack_bytes + self.frames_per_stack * self.sizes.conversion_bytes
        return math.ceil(work / ALLOCATOR_SEGMENT) * ALLOCATOR_SEGMENT + ALLOCATOR_SMALL_SEGMENT

    def components(self) -> dict[str, int]:
        """Bytes by what holds them (the caching allocator's and NVDEC's). With worker
        processes, each holds its decoder threads' parts, frame cache and resize filters,
        and a CUDA context (``worker_contexts``); the staging buffers are shared."""
        k = self.processes
        d = self.decoders * k
        return {
            "staging": self.gpu_staging_buffers * self.slot_bytes,
            "gop_stacks": d * self.stack_bytes,
            "conversion": d * (self.stream_reserve_bytes - self.stack_bytes),
            "cublas_workspaces": d * self.cublas_bytes,
            "frame_cache": k * self.frame_cache_bytes,
            "resize_weights": k * self.sizes.weight_bytes,
            "decoder_surfaces": d * DECODER_SURFACE_FRAMES * self.sizes.surface_bytes,
            "worker_contexts": k * WORKER_CONTEXT_BYTES if k > 1 else 0,
        }

    @property
    def total_bytes(self) -> int:
        return sum(self.components().values())

    @property
    def torch_bytes(self) -> int:
        """What PyTorch's allocators should reserve, summed over the processes (all but
        NVDEC's own surfaces and the workers' CUDA contexts)."""
        parts = self.components()
        return self.total_bytes - parts["decoder_surfaces"] - parts["worker_contexts"]

    def as_dict(self) -> dict:
        """JSON-able: the settings, each component and the totals, in bytes."""
        return {
            "budget_bytes": self.budget, "pool": self.pool, "processes": self.processes,
            "staging_slots": self.staging_slots,
            "gpu_staging_buffers": self.gpu_staging_buffers, "slot_bytes": self.slot_bytes,
            "decoders": self.decoders, "units_decoding": self.units_decoding,
            "stack_frames": self.stack_frames, "frame_cache_bytes": self.frame_cache_bytes,
            "frame_bytes": self.sizes.frame_bytes, "max_gop_frames": self.sizes.max_gop_frames,
            "conversion_bytes_per_frame": self.sizes.conversion_bytes,
            "cublas_bytes_per_decoder": self.cublas_bytes,
            "decoder_surface_bytes": DECODER_SURFACE_FRAMES * self.sizes.surface_bytes,
            "components_bytes": self.components(),
            "total_bytes": self.total_bytes, "torch_bytes": self.torch_bytes,
        }

    def summary(self) -> str:
        """One line: the total and its parts (for messages and logs)."""
        parts = ", ".join(f"{k.replace('_', ' ')} {describe(v)}"
                          for k, v in self.components().items() if v)
        threads = (f"{self.processes} processes of {self.decoders} decoders"
                   if self.processes > 1 else f"{self.decoders} decoders")
        return (f"{describe(self.total_bytes)} ({parts}; {threads}, "
                f"{self.units_decoding} units decoding, {self.gpu_staging_buffers} staging "
                f"buffers of {describe(self.slot_bytes)}, stacks of {self.stack_frames} frames)")


@dataclasses.dataclass(frozen=True)
class PlanInputs:
    """Everything a plan depends on but the knobs the budget lowers."""

    pool: str
    lookahead: int
    slots_for_units: Callable[[int], int]  # units_decoding -> the scheduler's slots
    slot_bytes: int
    sizes: VideoSizes
    cublas_bytes: int
    stride: int | None = None  # batches between overlapping units' starts (None: lookahead)
    processes: int = 1  # nvdec_processes


def make_plan(inputs: PlanInputs, *, budget: int | None, decoders: int, units_decoding: int,
              stack_frames: int, frame_cache_bytes: int) -> MemoryPlan:
    """The plan for these knobs (no search)."""
    slots = inputs.slots_for_units(units_decoding)
    return MemoryPlan(
        budget=budget, pool=inputs.pool, staging_slots=slots,
        gpu_staging_buffers=gpu_staging_buffers(inputs.pool, slots, inputs.lookahead, units_decoding,
                                                stride=inputs.stride),
        slot_bytes=inputs.slot_bytes, decoders=decoders, units_decoding=units_decoding,
        stack_frames=stack_frames, frame_cache_bytes=frame_cache_bytes, sizes=inputs.sizes,
        cublas_bytes=inputs.cublas_bytes, processes=inputs.processes,
    )


def fit_budget(inputs: PlanInputs, budget: int | None, *, decoders: int, units_decoding: int,
               stack_frames: int, frame_cache_bytes: int, given: object = None) -> MemoryPlan:
    """The plan for the given knobs, lowered step by step (:data:`BUDGET_STEPS`) until it
    fits :data:`BUDGET_FILL` of ``budget`` (``None``: as given). The given knobs are upper bounds: a budget never
    raises one.

    Raises:
        ConfigError: even the least plan (one decoder, one unit decoding, one-frame stacks,
            no frame cache) does not fit; names ``memory_budget`` (``given``, as passed), the
            least budget that fits and what to change.
    """
    knobs = {"decoders": decoders, "units_decoding": units_decoding,
             "stack_frames": stack_frames, "frame_cache_bytes": frame_cache_bytes}
    plan = make_plan(inputs, budget=budget, **knobs)
    if budget is None:
        return plan
    room = budget * BUDGET_FILL  # the plan's share of the budget (see BUDGET_FILL)
    for knob, value in BUDGET_STEPS:
        if plan.total_bytes <= room:
            return plan
        if value < knobs[knob]:
            trial = make_plan(inputs, budget=budget, **{**knobs, knob: value})
            if trial.total_bytes < plan.total_bytes:  # a step that saves nothing costs speed
                knobs[knob], plan = value, trial
    if plan.total_bytes <= room:
        return plan
    fewer = (f", pass fewer nvdec_processes (each holds {describe(WORKER_CONTEXT_BYTES)} and "
             f"its own decoders)" if plan.processes > 1 else "")
    raise ConfigError(
        f"memory_budget={given if given is not None else budget!r} ({describe(budget)}) is below "
        f"the least this loader needs on the GPU: {plan.summary()}, plus "
        f"{1 / BUDGET_FILL - 1:.0%} for what a plan does not see. Give at least "
        f"memory_budget='{math.ceil(plan.total_bytes / BUDGET_FILL / MIB)}MiB'{fewer}, or lower "
        f"batch_size or the output size (each staging buffer holds one batch: "
        f"{describe(plan.slot_bytes)})"
    )


def nvdec_knobs(options: dict, units_decoding: int) -> dict[str, int]:
    """The knobs a budget lowers, as the NVDEC options and ``units_decoding`` set them (the
    executor's defaults where an option is not given)."""
    from ..decoding.nvdec._executor import DEFAULT_FRAME_CACHE_BYTES  # the GPU side: on use

    return {"decoders": int(options["num_decoders"]), "units_decoding": int(units_decoding),
            "stack_frames": int(options.get("stack_frames", DEFAULT_STACK_FRAMES)),
            "frame_cache_bytes": int(options.get("frame_cache_bytes", DEFAULT_FRAME_CACHE_BYTES))}


def apply_knobs(options: dict, plan: MemoryPlan) -> dict:
    """``options`` (the executor's) with the plan's decoders, stacks and frame cache."""
    return {**options, "num_decoders": plan.decoders, "stack_frames": plan.stack_frames,
            "frame_cache_bytes": plan.frame_cache_bytes}
