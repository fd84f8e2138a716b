"""GPU memory faults on the NVDEC path, on a real GPU (issue 17 item 7): GPU memory exhausted
by another tensor raises :class:`GpuMemoryError` whatever ``on_error`` says, frees what the
loader held and leaves it usable; 50 loaders started, broken out of and dropped leak no GPU
memory, thread or process.

Every test needs a GPU with PyNvVideoCodec (``cuda`` marker); CPU CI skips them.
``test_gpu_memory.py`` checks the same logic on the CPU with the stand-in NVDEC.
"""

from __future__ import annotations

import gc
import math
import multiprocessing
import threading
import time

import pytest
import torch

import vidloader
from vidloader import GpuMemoryError, RandomFrames, VideoLoader, WorkerError

from .media import make_small_dataset

pytestmark = pytest.mark.cuda

#: Output size and batch that make the staging slots large (19 MiB each, 8+ slots), so that
#: memory for a few batches is more than the other tensor leaves.
BIG = dict(batch_size=32, size=(448, 448))
#: Bytes the other tensor leaves free: less than the staging slots (at iteration start) ...
LEAVE_AT_START = 64 << 20
#: ... or than one batch's copy out of its slot (mid-epoch).
LEAVE_MID_EPOCH = 4 << 20


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    """Four tiny H.264 videos (96x64, 20..35 frames, 110 in all)."""
    paths = make_small_dataset(tmp_path_factory.mktemp("gpu_faults"), n=4)
    return vidloader.build_index(paths, num_workers=0, progress=False)


def _settle() -> None:
    """Free what can be freed: garbage, the caching allocator's unused blocks (also those
    waiting on another stream's events), so that ``memory_allocated`` counts live tensors."""
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()


def _hog(leave: int) -> torch.Tensor:
    """A tensor that takes all but about ``leave`` bytes of the GPU's free memory: another
    tensor (a model's, say) that leaves the loader too little."""
    _settle()
    # Whole 2 MiB: then torch's allocator counts exactly the tensor's bytes as allocated.
    size = (torch.cuda.mem_get_info()[0] - leave) & ~((2 << 20) - 1)
    for _ in range(16):  # the driver's free figure may be a little more than one malloc gets
        try:
            return torch.empty(size, dtype=torch.uint8, device="cuda")
        except torch.cuda.OutOfMemoryError:
            size -= 16 << 20
    pytest.fail(f"could not allocate all but {leave >> 20} MiB of the GPU")


def _holders(limit: int = 6, depth: int = 18) -> list[str]:
    """For a failed memory check: each live CUDA tensor over 1 MiB (but the other tensor)
    and the chain of what keeps it alive, ``depth`` levels up (a frame by its function and
    line, a dict by its keys, a list by its length), so the log says what held it."""
    objects = gc.get_objects()
    tensors = []
    for obj in objects:
        try:
            if isinstance(obj, torch.Tensor) and obj.is_cuda and \
                    (1 << 20) < obj.untyped_storage().nbytes() < (1 << 34):
                tensors.append(obj)
        except Exception:  # noqa: BLE001 - any object may be half-built or odd
            continue
    del objects
    found, chained = [], []
    for k in range(min(limit, len(tensors))):
        t = tensors[k]
        links = _chain(t, depth, {id(tensors), id(chained)}, chained)
        found.append(f"{tuple(t.shape)} {t.dtype}: " + " <- ".join(links))
    return found + _in_running_frames(tensors) + _in_running_frames(chained)


def _in_running_frames(tensors: list) -> list[str]:
    """Locals of the frames running now, in every thread, that are (views of) ``tensors``:
    what the collector cannot see (a running frame is not a referrer)."""
    import sys

    storages = {t.untyped_storage().data_ptr() for t in tensors if isinstance(t, torch.Tensor)}
    wanted = {id(t) for t in tensors}
    names = {t.ident: t.name for t in threading.enumerate()}
    held = []
    for thread_id, frame in sys._current_frames().items():
        while frame is not None:
            if frame.f_code.co_name in ("_holders", "_in_running_frames", "_chain"):
                frame = frame.f_back
                continue
            for name, value in list(frame.f_locals.items()):
                if any(_holds(value, storages, wanted, 3)):
                    held.append(f"thread {names.get(thread_id, thread_id)}: "
                                f"{frame.f_code.co_name}:{frame.f_lineno} {name}")
            frame = frame.f_back
    return held


def _holds(value, storages: set, wanted: set, depth: int):
    """Whether ``value`` is, or holds within ``depth`` levels of lists, tuples and dicts, one
    of the ``wanted`` objects or a tensor on one of ``storages``."""
    if id(value) in wanted:
        yield True
    elif isinstance(value, torch.Tensor):
        yield value.is_cuda and value.untyped_storage().data_ptr() in storages
    elif depth > 0 and isinstance(value, (list, tuple, dict)):
        for item in (value.values() if isinstance(value, dict) else value):
            yield from _holds(item, storages, wanted, depth - 1)


def _chain(obj, depth: int, ignore: set[int], chained: list | None = None) -> list[str]:
    """What refers to ``obj``, ``depth`` levels up: at each level every referrer described
    (a frame by its function and line, a dict by its keys, a list by its length), and the
    first followed. This function's own lists are skipped (one list per level, its id
    ignored: a second, filtered copy once passed itself off as a referrer). The objects
    followed are appended to ``chained``."""
    import types

    out, ignore = [], set(ignore)
    for _ in range(depth):
        refs = [r for r in gc.get_referrers(obj) if id(r) not in ignore and not (
            isinstance(r, types.FrameType) and r.f_code.co_name in ("_chain", "_holders"))]
        ignore.add(id(refs))
        if not refs:
            out.append("(nothing the collector sees)")
            break
        out.append(" | ".join(_describe(r) for r in refs[:4]))
        obj = refs[0]
        ignore.add(id(obj))
        if chained is not None:
            chained.append(obj)
    return out


def _describe(obj) -> str:
    import types

    if isinstance(obj, types.FrameType):
        return f"frame {obj.f_code.co_name}:{obj.f_lineno}"
    if isinstance(obj, dict):
        return f"dict{sorted(map(str, obj))[:6]}"
    if isinstance(obj, (list, tuple)):
        return f"{type(obj).__name__}[{len(obj)}]"
    if isinstance(obj, types.CellType):
        return "cell"
    if isinstance(obj, types.FunctionType):
        return f"function {obj.__qualname__}"
    if isinstance(obj, BaseException):  # which error, and which of its links holds it
        return f"{type(obj).__qualname__}({str(obj)[:60]!r})"
    if isinstance(obj, types.TracebackType):
        return f"traceback@{obj.tb_frame.f_code.co_name}:{obj.tb_lineno}"
    return type(obj).__qualname__


class _Hogs:
    """The other tensor, held here and not in a test's locals: a failing test's traceback
    keeps its locals alive, and a leftover tensor took the GPU from every later test (the
    next loader's capability query then crashed the binding)."""

    def __init__(self) -> None:
        self.tensor: torch.Tensor | None = None

    def take(self, leave: int) -> int:
        self.tensor = _hog(leave)
        return self.tensor.numel()

    def free(self) -> None:
        self.tensor = None
        _settle()


@pytest.fixture
def hogs():
    h = _Hogs()
    yield h
    h.free()


def _frames(batches) -> list[tuple[int, int]]:
    return [(int(v), int(f)) for b in batches for v, f in zip(b["video_index"], b["frame_index"])]


def _every_frame(index) -> list[tuple[int, int]]:
    return [(v, f) for v in range(len(index)) for f in range(index[v].num_frames)]


def _staging_bytes(loader: VideoLoader) -> int:
    """The GPU staging buffers' bytes (fewer buffers than slots in separation mode)."""
    return loader.gpu_staging_buffers * sum(math.prod(s) for s in loader.config.shapes.values())


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("on_error", ["raise", "skip"])
def test_gpu_memory_taken_by_another_tensor_at_start(index, hogs, on_error, num_workers):
    """Another tensor leaves 64 MiB: the staging slots (the iteration's first GPU
    allocation) do not fit. GpuMemoryError names them (with on_error='skip' too: nothing is
    skipped), the loader holds no GPU memory afterwards although the exception is held, and
    once the tensor is freed a new iteration gives the whole epoch."""
    loader = VideoLoader(index, sampler=RandomFrames(seed=0), backend="nvdec", on_error=on_error,
                         num_workers=num_workers, nvdec_decoders=4, **BIG)
    assert _staging_bytes(loader) > 2 * LEAVE_AT_START
    hogs.take(LEAVE_AT_START)
    _settle()
    before = torch.cuda.memory_allocated()
    with pytest.raises(GpuMemoryError) as caught:
        list(loader)
    error = caught.value
    assert not isinstance(error, WorkerError)
    assert "staging slots" in error.what, str(error)
    # (The free figure is read when the error is built, after the failed allocation was let
    # go: on the H100 it said 458 MiB, more than the 147 MiB asked for.)
    assert error.free_bytes is not None
    for word in ("on_error='skip'", "batch_size", "backend='cpu'", "empty_cache"):
        assert word in str(error)
    assert loader.stats["skipped_files"] == []
    _settle()
    assert torch.cuda.memory_allocated() == before, _holders()  # freed, `error` still held
    hogs.free()
    assert sorted(_frames(loader)) == _every_frame(index)
    loader.shutdown()


@pytest.mark.parametrize("num_workers", [0, 2])
def test_gpu_memory_taken_by_another_tensor_mid_epoch(index, hogs, num_workers):
    """After the first batch, another tensor takes all but 4 MiB: the next batch's GPU work
    (its copy out of the slot, if not a decode or a conversion first) fails. GpuMemoryError
    with on_error='skip'; every GPU byte the loader held is freed; once the tensor is freed,
    a new iteration continues where the stream stopped, each frame once in all."""
    loader = VideoLoader(index, sampler=RandomFrames(seed=1), backend="nvdec", on_error="skip",
                         num_workers=num_workers, nvdec_decoders=4, **BIG)
    # A clean epoch first: what stays once per process (the conversion's cached weights on
    # the GPU) is made, so the loader's own memory can be told from it.
    assert sorted(_frames(loader)) == _every_frame(index)
    _settle()
    baseline = torch.cuda.memory_allocated()
    seen, hog_bytes = [], 0
    with pytest.raises(GpuMemoryError) as caught:
        for batch in loader:
            seen += _frames([batch])
            del batch
            if not hog_bytes:
                hog_bytes = hogs.take(LEAVE_MID_EPOCH)
    assert not isinstance(caught.value, WorkerError)
    assert 1 <= len(seen) // BIG["batch_size"] < len(loader)
    assert loader.stats["skipped_files"] == []
    _settle()
    # What the loader holds comes in MiBs (a slot 19 MiB, a frame 3 MiB); a few KiB more are
    # small process-wide constants made lazily on the error's path (36 KiB on the H100,
    # session10-6: no tensor over 1 MiB was left), which the 50-cycle test bounds too.
    left = torch.cuda.memory_allocated() - hog_bytes - baseline
    if left:
        print("\n".join([f"left alive ({left} bytes):", *_holders()]))
    assert left < (1 << 20), caught.value.what
    hogs.free()
    assert sorted(seen + _frames(loader)) == _every_frame(index)
    loader.shutdown()


def _workers() -> list[str]:
    """Loader worker processes still alive (the fork servers are not children of this one)."""
    return [p.name for p in multiprocessing.active_children() if p.name.startswith("vidloader-worker")]


def _threads_settle(count: int, timeout: float = 10.0) -> int:
    """``threading.active_count()`` once it is down to ``count`` (queue feeder threads end a
    moment after their queue is closed), or what it still is after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while threading.active_count() > count and time.monotonic() < deadline:
        time.sleep(0.05)
    return threading.active_count()


def test_fifty_loaders_broken_out_of_leak_no_gpu_memory_thread_or_process(index):
    """50 cycles of: an NVDEC loader with 2 demux workers, 2 batches, ``break``, ``del``.
    After the first cycle (which may leave once-per-process state, e.g. conversion
    constants), GPU memory allocated by torch does not grow at all; threads and worker
    processes are back to what they were; the GPU's free memory (NVDEC decoders included,
    which torch does not count) does not drift by more than noise."""
    def cycle() -> None:
        loader = VideoLoader(index, sampler=RandomFrames(seed=2), batch_size=8, backend="nvdec",
                             num_workers=2, nvdec_decoders=4)
        for k, _ in enumerate(loader):
            if k == 1:
                break
        del loader

    started = time.monotonic()
    cycle()
    _settle()
    allocated, free = torch.cuda.memory_allocated(), torch.cuda.mem_get_info()[0]
    time.sleep(1.0)  # the first cycle's queue feeder threads end
    threads = threading.active_count()
    for _ in range(49):
        cycle()
    _settle()
    assert torch.cuda.memory_allocated() == allocated
    assert _threads_settle(threads) <= threads, [t.name for t in threading.enumerate()]
    assert not _workers(), _workers()
    drift = free - torch.cuda.mem_get_info()[0]
    assert drift < 256 << 20, f"free GPU memory fell by {drift >> 20} MiB over 49 loaders"
    assert time.monotonic() - started < 120
