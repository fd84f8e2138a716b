"""The NVDEC loader's GPU memory on the CPU: staging buffers sized by what decodes, GOP stacks
bounded by ``stack_frames``, the conversion's workspace estimate, and ``memory_budget``.

NVDEC is the stand-in of ``_fake_nvc`` (its "GPU" staging lives on the CPU); the demux
workers are real processes. What the GPU itself holds (caching allocator, cuBLAS, NVDEC
surfaces) is measured by ``benchmarks/diag/gpu_memory_probe.py`` on the device.
"""

from __future__ import annotations

import dataclasses
import weakref
from fractions import Fraction

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

import vidloader
from vidloader import (
    Clips,
    ConfigError,
    GopShuffle,
    Process,
    RandomFrames,
    SequentialFrames,
    VideoLoader,
)
from vidloader.constants import DEFAULT_STACK_FRAMES
from vidloader.decoding.nvdec._executor import NvdecExecutor
from vidloader.index import VideoIndex, VideoRecord
from vidloader.pipeline import _pool
from vidloader.pipeline._memory import GIB, MIB, parse_memory_budget
from vidloader.planning import plan_tasks_for_frames
from vidloader.processing._nv12 import conversion_bytes, nv12_to_rgb_batch
from vidloader.synthetic import VideoSpec, make_dataset

from . import _fake_nvc
from ._nvdec_media import make_media, record_of, reference_nv12
from .media import collect_batches, resumed_stream

# ---------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    root = tmp_path_factory.mktemp("memory_budget")
    specs = [VideoSpec(codec="h264", width=96, height=64, num_frames=30 + 6 * i, gop=10, bframes=2,
                       seed=300 + i) for i in range(4)]
    paths = make_dataset(root, specs, names=[f"v{i}.mp4" for i in range(len(specs))], num_workers=2)
    return vidloader.build_index(paths, num_workers=0, progress=False)


@pytest.fixture
def fake(monkeypatch):
    return _fake_nvc.install_on_cpu(monkeypatch)


@pytest.fixture(scope="session")
def media(tmp_path_factory):
    return make_media(tmp_path_factory)


def _loader(index, **kwargs) -> VideoLoader:
    options = dict(sampler=RandomFrames(seed=7), batch_size=6, size=(32, 48), backend="nvdec",
                   num_workers=2, device="cpu", nvdec_decoders=4)
    return VideoLoader(index, **{**options, **kwargs})


def _samples(batches) -> list[tuple[int, int]]:
    return [(int(v), int(f)) for b in batches for v, f in zip(b["video_index"], b["frame_index"])]


def _every_frame(index) -> list[tuple[int, int]]:
    return [(v, f) for v, r in enumerate(index) for f in range(r.num_frames)]


def _count_staging(monkeypatch) -> list[tuple[int, bool]]:
    """``(slots, shared)`` of every staging allocation from now on: GPU buffers unshared,
    CPU workers' slots (``SharedSlots``) shared."""
    made, allocate, shared_slots = [], _pool._allocate, _pool.SharedSlots

    def counted(shapes, num_slots, *, device=None):
        made.append((num_slots, False))
        return allocate(shapes, num_slots, device=device)

    def counted_shared(shapes, num_slots):
        made.append((num_slots, True))
        return shared_slots(shapes, num_slots)

    monkeypatch.setattr(_pool, "_allocate", counted)
    monkeypatch.setattr(_pool, "SharedSlots", counted_shared)
    return made


def _executor(loader):
    """The NVDEC executor behind a started loader (through the lazy stand-in)."""
    pool = loader._pool
    pool = getattr(pool, "gpu", pool)  # the combo's NVDEC side
    return pool.assembler.executor._get()


# ------------------------------------------------------------------- memory_budget parsing

@pytest.mark.parametrize(("value", "expected"), [
    (None, None), (3 << 30, 3 << 30), ("3GiB", 3 << 30), ("512MiB", 512 << 20),
    (" 1.5 gib ", 3 << 29), ("2.5GB", 2_500_000_000), ("1024", 1024), ("64KiB", 65536),
    ("100b", 100), ("2G", 2_000_000_000),
])
def test_memory_budget_parses_bytes_and_size_strings(value, expected):
    assert parse_memory_budget(value) == expected


@pytest.mark.parametrize(("value", "text"), [
    ("lots", "got 'lots'"), ("3 GiBs", "got '3 GiBs'"), (True, "got True (bool)"),
    (1.5e9, "got 1500000000.0 (float)"), (0, "more than 0 bytes, got 0"),
    (-5, "more than 0 bytes, got -5"), ("0MiB", "more than 0 bytes, got '0MiB'"), ("", "got ''"),
])
def test_memory_budget_mistakes_name_the_argument_the_value_and_the_forms(value, text):
    with pytest.raises(ConfigError) as caught:
        parse_memory_budget(value)
    message = str(caught.value)
    assert "memory_budget" in message and text in message, message
    assert "'3GiB'" in message  # the fix: the forms it takes


def test_memory_budget_needs_a_gpu_backend_and_stack_frames_an_int(index, fake):
    with pytest.raises(ConfigError, match=r"memory_budget='1GiB' bounds .* backend='cpu'"):
        VideoLoader(index, batch_size=4, num_workers=0, memory_budget="1GiB")
    with pytest.raises(ConfigError, match=r"nvdec_options\['stack_frames'\] must be an int >= 1.*got 0"):
        _loader(index, nvdec_options={"stack_frames": 0})
    with pytest.raises(ConfigError, match="stack_frames must be an int >= 1"):
        NvdecExecutor(stack_frames=0)


def test_a_budget_below_the_least_plan_is_refused_naming_the_minimum(index, fake):
    with pytest.raises(ConfigError) as caught:
        _loader(index, memory_budget="1MiB")
    message = str(caught.value)
    assert message.startswith("memory_budget='1MiB' (1.0 MiB) is below the least this loader needs")
    # the least plan: one decoder; stacks and units only where lowering them saves bytes
    # (this index's tiny pictures fit one allocator segment at any stack size)
    assert "; 1 decoders, 1 units decoding" in message
    least = int(message.split("Give at least memory_budget='")[1].split("MiB'")[0])
    assert "plus 9% for what a plan does not see" in message
    loader = _loader(index, memory_budget=f"{least}MiB")  # the minimum it names fits
    plan = loader.memory_plan
    assert plan["decoders"] == 1 and plan["total_bytes"] <= 0.92 * least * MIB  # BUDGET_FILL
    with pytest.raises(ConfigError):  # and it is the least: the plan fills 92% of it
        _loader(index, memory_budget=f"{least - 1}MiB")


# ------------------------------------------------------------ staging buffers on the GPU

@pytest.mark.parametrize("workers", [2, 4])
def test_nvdec_gpu_staging_does_not_grow_with_demux_workers(index, fake, monkeypatch, workers):
    """Separation mode: a unit being demuxed holds no GPU buffer, so the GPU buffers are
    ``lookahead × units_decoding`` whatever the demux workers (they were one slot per
    scheduler slot, ``lookahead × (workers + prefetch − 1)``: 68 of 19 MiB on W1); the epoch
    is still every frame once, and no buffer was ever made beyond the count."""
    made = _count_staging(monkeypatch)
    loader = _loader(index, num_workers=workers, lookahead=2, nvdec_options={"units_decoding": 1})
    assert loader.staging_slots == 2 * (workers + 2 - 1)
    assert loader.gpu_staging_buffers == 2 * 1
    batches = collect_batches(loader)
    assert made == [(2, False)], made  # one allocation: the two buffers
    assert sorted(_samples(batches)) == _every_frame(index)
    staging = loader.stats["gpu_staging"]
    assert staging["buffers"] == 2 and 1 <= staging["peak_in_use"] <= 2, staging
    assert staging["overflows"] == 0 and staging["in_use"] == 0, staging


def test_a_break_gives_the_buffers_back_for_the_next_epoch(index, fake):
    """Persistent workers, a ``break`` mid-epoch: the scheduler drains the units in flight and
    releases the slots of the batches never yielded, so the next epoch finds every buffer free
    (no extra one made) and delivers every frame once."""
    loader = _loader(index, persistent_workers=True, lookahead=2, nvdec_options={"units_decoding": 1})
    for _ in zip(range(2), loader):
        pass
    assert loader.stats["gpu_staging"]["in_use"] == 0
    loader.set_epoch(1)
    assert sorted(_samples(collect_batches(loader))) == _every_frame(index)
    staging = loader.stats["gpu_staging"]
    assert staging["overflows"] == 0 and staging["in_use"] == 0, staging
    loader.shutdown()


def test_combo_gpu_staging_is_sized_by_nvdecs_units(index, fake, monkeypatch):
    """The combo keeps a shared-memory slot per scheduler slot for its CPU workers, and GPU
    buffers for NVDEC's units only: ``(lookahead + 1) × (units_decoding + 1)``."""
    made = _count_staging(monkeypatch)
    loader = _loader(index, backend="combo", num_workers=3, lookahead=2,
                     nvdec_options={"units_decoding": 1})
    cpu = collect_batches(_loader(index, backend="cpu", num_workers=0))
    batches = collect_batches(loader)
    slots = loader.staging_slots
    assert (slots, True) in made and (min(slots, 3 * 2), False) in made, made
    assert _samples(batches) == _samples(cpu)
    assert loader.stats["gpu_staging"]["peak_in_use"] <= min(slots, 6)


def test_w1_arithmetic_staging_before_and_after(fake):
    """W1's settings (1080p, batch 128 at 224², 16 demux workers, 16 decoders, lookahead 4,
    prefetch 2): 68 scheduler slots of 18.4 MiB as before, of which 16 GPU buffers (they were
    68, 1.22 GiB on the H100), and ``memory_budget='3GiB'`` plans within 3 GiB."""
    index = _w1_index()
    options = dict(batch_size=128, backend="nvdec", num_workers=16, nvdec_decoders=16,
                   processing=Process(size=(224, 224)), device="cpu", drop_last=True)
    loader = VideoLoader(index, **options)
    plan = loader.memory_plan
    assert loader.staging_slots == 68 and loader.gpu_staging_buffers == 16
    assert plan["slot_bytes"] == 128 * 224 * 224 * 3
    assert plan["components_bytes"]["staging"] == 16 * 128 * 224 * 224 * 3  # 294 MiB, was 1.22 GiB
    assert plan["frame_bytes"] == 1620 * 1920 and plan["stack_frames"] == 16
    assert plan["components_bytes"]["gop_stacks"] == 16 * 16 * 1620 * 1920
    assert plan["frame_cache_bytes"] == 0  # off by default since session 21
    assert plan["components_bytes"]["cublas_workspaces"] == 16 * 32 * MIB  # the fake is sm90
    budgeted = VideoLoader(index, **options, memory_budget="3GiB")
    small = budgeted.memory_plan
    # The plan fills at most BUDGET_FILL of the budget (plans fell 5-8% short of nvidia-smi).
    assert small["total_bytes"] <= 0.92 * 3 * GIB < plan["total_bytes"]
    # The budget lowers the frame cache and then the decoders to 8 first (each holds ~176 MiB
    # of NVDEC surfaces at 1080p, and 8 decoded sequential W1 faster than 12 in session17-4),
    # then the stacks; the units decoding stay at 4 here.
    assert (small["stack_frames"], small["units_decoding"], small["decoders"]) == (4, 4, 8)
    assert small["frame_cache_bytes"] == 0
    assert budgeted.gpu_staging_buffers == 16 and budgeted.staging_slots == 68
    assert budgeted.config.nvdec_options["stack_frames"] == 4
    assert budgeted.config.nvdec_options["num_decoders"] == 8
    for other in (4, 8):  # the scheduler's slots follow the workers, the GPU buffers do not
        assert VideoLoader(index, **{**options, "num_workers": other}).gpu_staging_buffers == 16


def _w1_index(videos: int = 100, frames: int = 60, gop: int = 30) -> VideoIndex:
    """Records shaped like W1 at the gpu-quick scale (1080p H.264, GOP 30); no file behind
    them: building a loader reads none."""
    return VideoIndex([
        VideoRecord(path=f"/w1/video_{i:04d}.mp4", codec="h264", width=1920, height=1080,
                    pix_fmt="yuv420p", bit_depth=8, rotation=0, fps=30.0,
                    time_base=Fraction(1, 15360), num_frames=frames,
                    keyframes=np.arange(0, frames, gop, dtype=np.int64),
                    pts=np.arange(frames, dtype=np.int64) * 512, profile="High", size_bytes=1)
        for i in range(videos)
    ])


def test_staging_buffers_bind_on_demand_release_and_make_extras_only_when_told():
    staging = _pool.StagingBuffers({"x": (2, 1, 4, 4, 3)}, num_slots=6, num_buffers=2)
    assert len(staging) == 6 and staging.counters["buffers"] == 2
    assert staging.can_bind([0, 1, 1]) and not staging.can_bind([0, 1, 2])
    staging.bind([0, 1, 1], [10, 11, 11])  # a slot named twice (two parts of a batch) binds once
    staging[0]["x"].fill_(7)
    assert staging.oldest_batch() == 10 and staging.missing([1, 2]) == 1
    with pytest.raises(IndexError, match="slot 2 holds no GPU buffer"):
        staging[2]
    with pytest.raises(RuntimeError, match="no free GPU staging buffer"):
        staging.bind([2], [12])
    staging.release(0)
    staging.bind([2], [12])
    assert staging[2]["x"].data_ptr() in {b["x"].data_ptr() for b in staging.buffers}
    staging.bind([3], [13], extra=True)
    assert staging.counters["overflows"] == 1 and staging.counters["peak_in_use"] == 3
    staging.release(3)
    staging.release(5)  # never bound: nothing to do
    assert staging.counters["in_use"] == 2 and staging.oldest_batch() == 11


def test_the_pool_waits_for_a_buffer_and_makes_one_only_when_waiting_cannot_help(monkeypatch):
    """``SeparationPool._reserve``: a unit whose batches are all newer than a bound one waits
    (a delivery will free a buffer); it gets an extra buffer when a unit not started (itself,
    or one queued behind it) holds the oldest batch, or when the caller blocks with nothing
    decoding, or after ``STAGING_WAIT_SECONDS`` with nothing decoding."""
    import collections

    from vidloader.pipeline._messages import FillTask

    class Plan:
        def __init__(self, b):
            self.batch_index = b

    pool = object.__new__(_pool.SeparationPool)  # the reservation logic alone
    pool.slots = _pool.StagingBuffers({"x": (1, 1, 2, 2, 3)}, num_slots=8, num_buffers=2)
    pool._decoding, pool._stuck_since = collections.deque(["busy"]), None
    pool._units = {k: (FillTask(slots, [Plan(b) for b in batches], [0] * len(slots)), None)
                   for k, slots, batches in [(0, [0, 1], [4, 5]), (1, [2], [6]), (2, [3], [3]),
                                             (3, [4], [7]), (4, [5], [2])]}
    pool._order = collections.deque([0, 1, 3])  # _reserve is asked for the head
    assert pool._reserve(0, block=False)
    pool._order.popleft()
    assert not pool._reserve(1, block=False)  # batches 4, 5 will be delivered first
    pool._order.appendleft(2)
    assert pool._reserve(2, block=False)  # batch 3 is older than any bound: waiting cannot help
    assert pool.slots.counters["overflows"] == 1
    pool._order.popleft()
    pool._order.append(4)  # queued behind 1 and 3, and older than every bound batch
    assert pool._reserve(1, block=False) and pool.slots.counters["overflows"] == 2
    pool._order = collections.deque([3])
    pool._decoding.clear()
    assert not pool._reserve(3, block=False)  # nothing decodes, but it has not waited long
    now = [1e9]
    monkeypatch.setattr(_pool.time, "monotonic", lambda: now[0])
    pool._stuck_since = now[0] - _pool.STAGING_WAIT_SECONDS
    assert pool._reserve(3, block=False) and pool.slots.counters["overflows"] == 3
    assert pool._reserve(3, block=True)  # bound already


# ------------------------------------------------------------------ GOP stacks, conversion

def test_stack_frames_bounds_the_frames_held_and_every_frame_still_comes_once(media, fake):
    """``submit_batch`` with stacks of 2: a GOP's wanted frames reach the sink in calls of
    at most 2, ascending, each once and exact, and no more than ``decoders × 2`` decoded
    frames are held at once (was: a stack per GOP, all its wanted frames)."""
    ex = NvdecExecutor(num_decoders=3, frame_cache_bytes=0, packet_cache_bytes=0, stack_frames=2)
    wanted = [("h264", list(range(0, 12)) + [30, 31, 33]), ("hevc", [0, 1, 2, 3, 4, 40]),
              ("h264_small", [7, 8, 9])]
    tasks = [plan_tasks_for_frames(k, record_of(media[n]), f) for k, (n, f) in enumerate(wanted)]
    got, calls = {}, []

    def sink(pos, indices, frames):
        assert indices == sorted(indices) and len(frames) == len(indices) <= 2
        calls.append(len(indices))
        for k, i in enumerate(indices):
            assert (pos, i) not in got, "frame delivered twice"
            got[(pos, i)] = _fake_nvc.as_numpy(frames.nv12[k]).copy()

    ex.submit_batch(tasks, sink).wait()
    assert sorted(got) == sorted((t.video_index, int(i)) for t in tasks for i in t.frames)
    for (pos, i), nv12 in got.items():
        name = wanted[pos][0]
        assert np.array_equal(nv12[:, : record_of(media[name]).width], reference_nv12(media[name])[i])
    assert max(calls) == 2 and len(calls) > sum(len(t.gops) for t in tasks)
    assert 2 <= ex.frames_held_peak <= 3 * 2 and ex.frames_held == 0
    ex.close()


def test_stacks_hold_at_most_stack_frames(media, fake):
    task = plan_tasks_for_frames(0, record_of(media["h264"]), list(range(0, 12)))  # one GOP of 12
    for stack_frames, want in ((8, [8, 4]), (DEFAULT_STACK_FRAMES, [12])):
        ex = NvdecExecutor(num_decoders=2, packet_cache_bytes=0, stack_frames=stack_frames)
        sizes = []
        ex.submit_batch([task], lambda pos, indices, frames: sizes.append(len(indices))).wait()
        assert sizes == want and ex.frames_held_peak == max(want)
        assert ex.frame_cache.max_bytes == 0  # off by default
        ex.close()
    assert DEFAULT_STACK_FRAMES == 16


class _PeakBytes(TorchDispatchMode):
    """The most bytes of tensor storage alive at once among those made inside the mode."""

    def __init__(self, exclude=()) -> None:
        super().__init__()
        self.live: dict[int, int] = {}
        self.current = self.peak = 0
        self.exclude = set(exclude)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                storage = t.untyped_storage()
                key = storage.data_ptr()
                if key in self.live or key in self.exclude or storage.nbytes() == 0:
                    continue
                self.live[key] = storage.nbytes()
                self.current += storage.nbytes()
                self.peak = max(self.peak, self.current)
                weakref.finalize(storage, self._free, key)
        return out

    def _free(self, key: int) -> None:
        self.current -= self.live.pop(key, 0)


@pytest.mark.parametrize(("hw", "out"), [
    ((1080, 1920), (224, 224)), ((1080, 1920), (720, 1280)), ((1080, 1920), (1080, 1920)),
    ((720, 1280), (112, 112)), ((64, 96), (128, 192)),
])
@pytest.mark.parametrize("dtype", [torch.uint8, torch.uint16])
def test_the_conversion_estimate_bounds_what_the_kernels_allocate(hw, out, dtype):
    """``conversion_bytes`` (the plan's conversion workspace per frame) is at least what the
    NV12/P016 kernels allocate at once, measured op by op on the CPU, and within 1.35×."""
    (h, w), n = hw, 2
    frames = torch.randint(0, 255, (n, h + (h + 1) // 2, w), dtype=torch.uint8).to(dtype)
    nv12_to_rgb_batch(frames, height=h, width=w, out_size=out)  # the cached filter weights
    mode = _PeakBytes(exclude=[frames.untyped_storage().data_ptr()])
    with mode:
        rgb = nv12_to_rgb_batch(frames, height=h, width=w, out_size=out)
        del rgb
    estimate = conversion_bytes(h, w, out, deep=dtype == torch.uint16)
    assert mode.peak / n <= estimate <= 1.35 * mode.peak / n, (mode.peak / n, estimate)


# ------------------------------------------------------------------------- memory_budget

def _budget_between(index, fake) -> str:
    """A budget that forces the plan down (fewer decoders) but fits."""
    plan = _loader(index).memory_plan
    return f"{(plan['total_bytes'] // 3) // MIB}MiB"


@pytest.mark.parametrize("sampler", [RandomFrames(seed=7), GopShuffle(seed=2)])
def test_a_budget_lowers_what_is_in_flight_and_the_batches_stay_identical(index, fake, sampler):
    """A budget of a third of the default plan: fewer decoders, units decoding, stack frames
    and staging buffers; the loader still delivers every sample once, in the same batches,
    bit for bit."""
    free = _loader(index, sampler=sampler)
    budget = _budget_between(index, fake)
    tight = _loader(index, sampler=sampler, memory_budget=budget)
    big, small = free.memory_plan, tight.memory_plan
    assert small["total_bytes"] <= parse_memory_budget(budget) < big["total_bytes"]
    # stacks stay: this index's tiny pictures fit one allocator segment at any stack size, and
    # a step that saves nothing is skipped
    assert small["decoders"] < big["decoders"] and small["stack_frames"] == big["stack_frames"]
    assert small["units_decoding"] < big["units_decoding"]
    assert tight.gpu_staging_buffers < free.gpu_staging_buffers
    assert tight.config.nvdec_options["num_decoders"] == small["decoders"]
    want, got = collect_batches(free), collect_batches(tight)
    assert sorted(_samples(got)) == _every_frame(index)
    assert len(got) == len(want)
    for a, b in zip(want, got, strict=True):
        assert a.keys() == b.keys()
        for key in a:
            assert torch.equal(a[key], b[key]), key
    staging = tight.stats["gpu_staging"]  # (GopShuffle's lookahead, its largest block, is per epoch)
    assert staging["peak_in_use"] <= staging["buffers"] and staging["overflows"] == 0


def test_frames_held_stay_within_the_plan(index, fake):
    loader = _loader(index, sampler=GopShuffle(seed=3), memory_budget=_budget_between(index, fake))
    it = iter(loader)
    next(it)
    executor = _executor(loader)
    batches = list(it)
    plan = loader.memory_plan
    assert 1 <= executor.frames_held_peak <= plan["decoders"] * plan["stack_frames"]
    assert executor.stack_frames == plan["stack_frames"] and batches


def test_resume_under_a_budget_continues_the_stream(index, fake):
    budget = _budget_between(index, fake)
    assert _loader(index, memory_budget=budget).memory_plan["decoders"] < 4  # the budget bites
    stream, full, _ = resumed_stream(lambda: _loader(index, memory_budget=budget), after=2)
    unbudgeted = collect_batches(_loader(index))
    assert _samples(stream) == _samples(full) == _samples(unbudgeted)
    for a, b in zip(stream, unbudgeted, strict=True):
        assert torch.equal(a["frames"], b["frames"])


def _processes(index, **kwargs) -> VideoLoader:
    """A loader of NVDEC worker processes, built but never iterated (no GPU here)."""
    return _loader(index, nvdec_processes=4, **kwargs)


def test_a_plan_of_processes_counts_each_process_and_shares_the_slots(index, fake):
    """Four processes of 4 decoders hold four times one process's decoder parts and resize
    filters, and a CUDA context each; the staging slots are the loader's, once."""
    from vidloader.pipeline._memory import WORKER_CONTEXT_BYTES

    cache = {"frame_cache_bytes": 3 * MIB}
    one, four = _loader(index, nvdec_options=cache), _processes(index, nvdec_options=cache)
    a, b = one.memory_plan, four.memory_plan
    assert (a["pool"], a["processes"], b["pool"], b["processes"]) == ("separation", 1, "processes", 4)
    assert a["decoders"] == b["decoders"] == 4
    per_decoder = ("gop_stacks", "conversion", "cublas_workspaces", "decoder_surfaces",
                   "resize_weights", "frame_cache")
    for part in per_decoder:
        assert b["components_bytes"][part] == 4 * a["components_bytes"][part], part
    assert a["components_bytes"]["worker_contexts"] == 0
    assert b["components_bytes"]["worker_contexts"] == 4 * WORKER_CONTEXT_BYTES
    assert b["gpu_staging_buffers"] == b["staging_slots"] == four.staging_slots
    assert b["components_bytes"]["staging"] == b["staging_slots"] * b["slot_bytes"]
    assert "4 processes of 4 decoders" in four._memory_plan().summary()
    assert b["torch_bytes"] == b["total_bytes"] - sum(b["components_bytes"][k] for k in
                                                      ("decoder_surfaces", "worker_contexts"))
    for loader in (one, four):
        loader.shutdown()


def test_a_budget_lowers_each_process_s_knobs_and_frees_slots(index, fake):
    """A budget between the least and the default plan lowers the decoders of every process,
    then their stacks and units (one unit a process: fewer staging slots); the knobs reach
    the config the workers are started with."""
    free = _processes(index)
    plan = free.memory_plan
    least = _processes(index, nvdec_decoders=1, nvdec_options={"stack_frames": 1, "units_decoding": 1})
    budget = int((least.memory_plan["total_bytes"] + plan["total_bytes"]) / 2 / 0.92)  # plans fill 92%
    tight = _processes(index, memory_budget=budget)
    small = tight.memory_plan
    assert small["total_bytes"] <= budget * 0.92 < plan["total_bytes"]
    assert small["decoders"] < plan["decoders"] and small["processes"] == 4
    assert tight.config.nvdec_options["num_decoders"] == small["decoders"]
    lowest = _processes(index, memory_budget=int(least.memory_plan["total_bytes"] / 0.92) + MIB)
    assert lowest.memory_plan["units_decoding"] == lowest.config.units_decoding == 1
    assert lowest.staging_slots < free.staging_slots
    for loader in (free, least, tight, lowest):
        loader.shutdown()


def test_a_budget_skips_steps_that_free_nothing(index, fake):
    """GopShuffle's blocks are cut over the processes whatever ``units_decoding`` says, so a
    budget never lowers it there (one unit a process would only idle the decoders), where it
    does with whole-batch units."""
    least = _processes(index, nvdec_decoders=1, nvdec_options={"stack_frames": 1})
    budget = int(least.memory_plan["total_bytes"] / 0.92) + MIB
    blocks = _processes(index, sampler=GopShuffle(seed=1), memory_budget=budget)
    assert blocks.uses_block_units and blocks.config.units_decoding == 4
    batches = _processes(index, memory_budget=budget)
    assert batches.config.units_decoding < 4
    for loader in (least, blocks, batches):
        loader.shutdown()


def test_a_budget_too_small_for_the_processes_names_them(index, fake):
    least = _processes(index, nvdec_decoders=1, nvdec_options={"stack_frames": 1, "units_decoding": 1})
    with pytest.raises(ConfigError, match="fewer nvdec_processes"):
        _processes(index, memory_budget=least.memory_plan["total_bytes"] // 2)
    least.shutdown()


def test_memory_plan_is_none_on_the_cpu_and_json_able_with_nvdec(index, fake):
    import json

    assert VideoLoader(index, batch_size=4, num_workers=0).memory_plan is None
    plan = _loader(index, memory_budget="1GiB").memory_plan
    assert json.loads(json.dumps(plan)) == plan
    assert plan["budget_bytes"] == GIB and plan["total_bytes"] == sum(plan["components_bytes"].values())


def _sized_index(sizes: list[tuple[int, int]], frames: int = 60) -> VideoIndex:
    """Records of the given (width, height), 60 frames each (no file behind them)."""
    return VideoIndex([
        VideoRecord(path=f"/v/video_{i:04d}.mp4", codec="h264", width=w, height=h,
                    pix_fmt="yuv420p", bit_depth=8, rotation=0, fps=30.0,
                    time_base=Fraction(1, 15360), num_frames=frames,
                    keyframes=np.arange(0, frames, 30, dtype=np.int64),
                    pts=np.arange(frames, dtype=np.int64) * 512, profile="High", size_bytes=1)
        for i, (w, h) in enumerate(sizes)
    ])


@pytest.mark.parametrize("sizes, decoders", [
    ([(1920, 1080)] * 3, 16),  # W1
    ([(3840, 2160)], 16),  # never more than the most per GPU
    ([(1600, 900)] * 6, 11),  # W3's cameras
    ([(1280, 720), (454, 340)] * 4, 4),  # W4: half 720p, half 340p
    ([(96, 64)], 4),  # never fewer than MIN_AUTO_NVDEC_DECODERS
])
def test_nvdec_decoders_none_picks_threads_by_frame_size(fake, sizes, decoders):
    """``nvdec_decoders=None`` (the default), every frame decoded once (in stream order): 16
    decoder threads for 1080p, in proportion to a frame's pixels below that, at least 4
    (session17-5/-6: on W4's clips from each video's head 4 threads decoded 1.5-1.9x as fast
    as 16, on W1's 1080p random frames 16 twice as fast as 4)."""
    index = _sized_index(sizes)
    options = dict(batch_size=4, backend="nvdec", num_workers=2, size=(32, 32), device="cpu",
                   sampler=SequentialFrames())
    loader = VideoLoader(index, **options)
    assert loader.memory_plan["decoders"] == decoders
    assert loader.config.nvdec_options["num_decoders"] == decoders
    chosen = VideoLoader(index, **options, nvdec_decoders=3)  # a number given is kept
    assert chosen.config.nvdec_options["num_decoders"] == 3


@pytest.mark.parametrize("sizes, processes, decoders", [
    ([(1920, 1080)] * 3, 2, 16),  # two processes: as one (2 × 16 / 2)
    ([(1920, 1080)] * 3, 4, 8),  # W1 in four: 2 × 16 / 4
    ([(1600, 900)] * 6, 4, 6),  # W3's cameras in four: ceil(2 × 11 / 4)
    ([(1280, 720), (454, 340)] * 4, 12, 2),  # W4's heads in twelve: session18-6's fastest
    ([(1920, 1080)] * 3, 16, 2),  # never fewer than MIN_PROCESS_NVDEC_DECODERS
])
def test_nvdec_processes_share_the_automatic_decoders(fake, sizes, processes, decoders):
    """With ``nvdec_processes=K``, each process takes ``ceil(2 × one process's choice / K)``
    threads, at least 2 and at most one process's choice: each thread holds surfaces, a stack
    and a conversion workspace, and W3 in four processes ran as fast on 8 a process as on 11
    or 16 in 6-19 GiB less GPU memory (session23-2). A number given is kept."""
    options = dict(batch_size=4, backend="nvdec", num_workers=2, size=(32, 32), device="cpu",
                   sampler=SequentialFrames(), nvdec_processes=processes)
    loader = VideoLoader(_sized_index(sizes), **options)
    assert loader.config.nvdec_options["num_decoders"] == decoders
    given = VideoLoader(_sized_index(sizes), **options, nvdec_decoders=5)
    assert given.config.nvdec_options["num_decoders"] == 5
    for each in (loader, given):
        each.shutdown()


def test_the_automatic_decoders_count_the_frames_decoded_per_delivered_one(fake):
    """Random frames of small videos decode from their keyframe (GOPs of 30 here: ~15 frames
    per delivered one), so NVDEC's work per delivered frame is a 1080p frame's or more: 16
    threads (session17-7: W4's random clips, GOP 250, 1,412 frames/s on 16 against 1,023 on 4)."""
    index = _sized_index([(1280, 720), (454, 340)] * 4)
    options = dict(batch_size=4, backend="nvdec", num_workers=2, size=(32, 32), device="cpu")
    assert VideoLoader(index, **options, sampler=RandomFrames(seed=0)).memory_plan["decoders"] == 16
    assert VideoLoader(index, **options, sampler=SequentialFrames()).memory_plan["decoders"] == 4
    clips = Clips(sequence_length=16, stride=1, step=10**6, seed=0)  # each video's head
    assert VideoLoader(index, **options, sampler=clips).memory_plan["decoders"] == 4


def test_the_automatic_decoders_weigh_each_video_by_its_frames(fake):
    long_small = _sized_index([(454, 340)], frames=600)
    records = list(long_small) + list(_sized_index([(1920, 1080)], frames=60))
    mixed = VideoIndex([dataclasses.replace(r, path=f"/m/{i}.mp4") for i, r in enumerate(records)])
    # by videos the mean frame would be half 1080p (8 threads); by frames it is mostly 340p
    loader = VideoLoader(mixed, batch_size=4, backend="nvdec", num_workers=2, size=(32, 32), device="cpu",
                         sampler=SequentialFrames())
    assert loader.memory_plan["decoders"] == 4


def test_the_automatic_decoders_plan_gop_shuffle_block_by_block(fake):
    """GopShuffle hands out each block as one unit, each GOP decoded forward once: small
    frames get the fewest threads. Its first batches planned together (as with ``lookahead``
    given, whole batches) count each GOP from its keyframe for the few frames they take:
    3.6 decoded per delivered here, 15 threads."""
    index = _sized_index([(1280, 720), (454, 340)] * 4)
    options = dict(batch_size=4, backend="nvdec", num_workers=2, size=(32, 32), device="cpu",
                   sampler=GopShuffle(seed=0))
    blocks = VideoLoader(index, **options)
    assert blocks.uses_block_units and blocks.memory_plan["decoders"] == 4
    batches = VideoLoader(index, **options, lookahead=2)
    assert not batches.uses_block_units and batches.memory_plan["decoders"] == 15


def test_the_combo_picks_its_nvdec_side_s_decoders_the_same_way(fake):
    index = _sized_index([(1280, 720), (454, 340)] * 4)
    options = dict(batch_size=4, backend="combo", num_workers=2, size=(32, 32), device="cpu")
    assert VideoLoader(index, **options, sampler=SequentialFrames()).config.nvdec_options["num_decoders"] == 4
    assert VideoLoader(index, **options, sampler=RandomFrames(seed=0)).config.nvdec_options["num_decoders"] == 16
