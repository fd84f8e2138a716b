"""GPU memory exhaustion on the NVDEC path (issue 17 item 7), on the CPU: the errors torch and
PyNvVideoCodec raise are recognised and named as :class:`GpuMemoryError`; the loader raises it
whatever ``on_error`` says (never a per-file skip, never wrapped in ``WorkerError``), stops and
frees everything, and works again once memory is free. The stand-in NVDEC
(``tests/_fake_nvc.py``) raises the binding's out-of-memory text. ``test_nvdec_gpu_faults.py``
does it on a real GPU."""

from __future__ import annotations

import gc
import multiprocessing
import threading
import weakref
from pathlib import Path

import pytest
import torch

import vidloader
from vidloader import GpuMemoryError, VidloaderError, WorkerError
from vidloader.decoding import (
    gpu_memory_error,
    gpu_memory_guard,
    is_gpu_out_of_memory,
    release_frames,
)
from vidloader.errors import CorruptVideoError
from vidloader.synthetic import VideoSpec, make_video

from . import _fake_nvc

#: What torch says when a CUDA allocation fails (its first sentences).
TORCH_OOM = ("CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of "
             "79.10 GiB of which 3.19 MiB is free.")

#: What every GpuMemoryError must name: the policy, and the fixes.
FIXES = ("on_error='skip'", "empty_cache", "batch_size", "units_decoding", "nvdec_decoders",
         "backend='cpu'")


def _names_the_fixes(error: BaseException) -> None:
    text = str(error)
    for word in FIXES:
        assert word in text, (word, text)


# ------------------------------------------------------------------ recognising and naming

@pytest.mark.parametrize("exc", [
    torch.cuda.OutOfMemoryError(TORCH_OOM),
    RuntimeError(_fake_nvc.OOM_TEXT),  # NVDEC_API_CALL: CUresult 2
    RuntimeError("CUDA driver API error CUDA_ERROR_OUT_OF_MEMORY"),  # CUDA_DRVAPI_CALL
    RuntimeError("cudaErrorMemoryAllocation: out of memory"),  # the runtime
], ids=["torch", "cuvid", "driver", "runtime"])
def test_out_of_memory_errors_are_recognised_and_named(exc):
    assert is_gpu_out_of_memory(exc)
    error = gpu_memory_error(exc, "the loader's staging slots: 8 slots of 3.0 MiB each", 0)
    assert isinstance(error, GpuMemoryError)
    assert isinstance(error, MemoryError) and isinstance(error, VidloaderError)
    assert not isinstance(error, WorkerError)
    assert error.device == "cuda:0" and error.what.startswith("the loader's staging slots")
    text = str(error)
    assert "cuda:0" in text and "staging slots: 8 slots of 3.0 MiB each" in text
    assert "free memory unknown" in text  # no CUDA here to ask
    assert str(exc)[:40] in text  # the original error, in short
    _names_the_fixes(error)


@pytest.mark.parametrize("exc", [
    RuntimeError("fake NVDEC failure"),
    RuntimeError("cuvidDecodePicture(m_hDecoder, pPicParams) returned error 20"),  # not 2
    RuntimeError("cuvidMapVideoFrame returned error 1"),
    ValueError("out of range"),
    MemoryError(),  # the host's: not the GPU's
    CorruptVideoError("v.mp4", "ran out of memory while parsing"),  # typed already
    GpuMemoryError("already converted"),
], ids=["decode", "error20", "error1", "value", "host", "typed", "converted"])
def test_other_errors_are_left_alone(exc):
    assert not is_gpu_out_of_memory(exc)
    with pytest.raises(type(exc)) as caught, gpu_memory_guard("anything", 0):
        raise exc
    assert caught.value is exc


def test_the_guard_chains_the_original_and_reads_the_free_memory(monkeypatch):
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (3 << 20, 80 << 30))
    original = torch.cuda.OutOfMemoryError(TORCH_OOM)
    with pytest.raises(GpuMemoryError) as caught, gpu_memory_guard("NVDEC decode surfaces", "cuda:1"):
        raise original
    error = caught.value
    assert error.__cause__ is original
    assert (error.free_bytes, error.total_bytes, error.device) == (3 << 20, 80 << 30, "cuda:1")
    assert "while allocating NVDEC decode surfaces (3.0 MiB free of 80.0 GiB;" in str(error)


def test_release_frames_lets_go_of_what_the_traceback_held():
    """A held exception keeps every frame it passed through alive, with its locals (staging
    slots, decoded frames): released, they go although the exception is still held."""
    held = []

    class Big:
        pass

    def allocate():
        big = Big()
        held.append(weakref.ref(big))
        raise torch.cuda.OutOfMemoryError(TORCH_OOM)

    def convert():
        with gpu_memory_guard("frames", 0):
            allocate()

    with pytest.raises(GpuMemoryError) as caught:
        convert()
    gc.collect()
    assert held[0]() is not None  # pinned by the chained cause's traceback
    release_frames(caught.value)
    gc.collect()
    assert held[0]() is None


def test_staging_slots_that_do_not_fit_are_named_and_not_kept(monkeypatch):
    from vidloader.pipeline import _pool

    made, real_zeros = [], torch.zeros

    def zeros(*args, **kwargs):
        if len(made) == 2:
            raise torch.cuda.OutOfMemoryError(TORCH_OOM)
        t = real_zeros(*args, **kwargs)
        made.append(weakref.ref(t))
        return t

    monkeypatch.setattr(torch, "zeros", zeros)
    with pytest.raises(GpuMemoryError) as caught:
        _pool._allocate({"frames": (8, 1, 64, 96, 3)}, 4, device=None)
    monkeypatch.undo()
    text = str(caught.value)
    assert "staging slots: 4 slots of 0.1 MiB each (0.6 MiB in all, 2 made" in text, text
    assert "'frames' 8x1x64x96x3" in text
    _names_the_fixes(caught.value)
    gc.collect()
    assert all(ref() is None for ref in made)  # not pinned by the held exception


# ------------------------------------------------------------ the loader, on the stand-in

def _video(path: Path, seed: int) -> Path:
    return make_video(path, VideoSpec(width=96, height=64, num_frames=20, gop=10, bframes=2, seed=seed))


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    root = tmp_path_factory.mktemp("gpu_memory")
    paths = [_video(root / f"v{i}.mp4", seed=60 + i) for i in range(3)]
    return vidloader.build_index(paths, num_workers=0, progress=False)


def _loader(index, **kwargs) -> vidloader.VideoLoader:
    options = dict(batch_size=8, backend="nvdec", device="cpu", on_error="skip",
                   sampler=vidloader.RandomFrames(seed=3))
    return vidloader.VideoLoader(index, **{**options, **kwargs})


def _frames(batches) -> list[tuple[int, int]]:
    return [(int(v), int(f)) for b in batches for v, f in zip(b["video_index"], b["frame_index"])]


def _every_frame(index) -> list[tuple[int, int]]:
    return [(v, f) for v in range(len(index)) for f in range(index[v].num_frames)]


def _watch_staging(monkeypatch) -> list:
    """Weak references to every staging tensor the pools allocate from now on."""
    from vidloader.pipeline import _pool

    refs, allocate = [], _pool._allocate

    def watched(*args, **kwargs):
        slots = allocate(*args, **kwargs)
        refs.extend(weakref.ref(t) for slot in slots for t in slot.values())
        return slots

    monkeypatch.setattr(_pool, "_allocate", watched)
    return refs


def _nothing_left_running() -> None:
    """No decoder thread and no loader worker outlives the error."""
    threads = [t.name for t in threading.enumerate() if t.name.startswith("vidloader-nvdec")]
    assert not threads, threads
    workers = [p.name for p in multiprocessing.active_children() if p.name.startswith("vidloader-worker")]
    assert not workers, workers


@pytest.mark.parametrize(("num_workers", "decoders", "where"), [
    (0, 16, "create"), (0, 16, "decode"), (0, 1, "decode"), (2, 16, "create"),
])
def test_nvdec_out_of_memory_is_raised_not_skipped_and_the_loader_works_after(
        index, monkeypatch, num_workers, decoders, where):
    """The binding runs out of GPU memory creating a decoder (or its surfaces, at the first
    ``Decode``), on decoder threads or (one decoder) on the loader's thread: with
    on_error='skip' the loader raises GpuMemoryError (not a WorkerError, no file skipped or
    sent to the CPU fallback), leaves nothing running and no staging slot held (though the
    caller holds the exception), and a new iteration gives the whole epoch once the fault is
    gone."""
    nvc = _fake_nvc.install_on_cpu(monkeypatch)
    staging = _watch_staging(monkeypatch)
    loader = _loader(index, num_workers=num_workers, nvdec_decoders=decoders)
    nvc.out_of_memory = where
    with pytest.raises(GpuMemoryError) as caught:
        list(loader)
    assert not isinstance(caught.value, WorkerError)
    assert "NVDEC decode" in caught.value.what or "NVDEC decoder" in caught.value.what
    _names_the_fixes(caught.value)
    assert loader.stats["skipped_files"] == [] and loader.stats["skipped_samples"] == 0
    assert loader.stats["cpu_fallback_files"] == {}
    assert loader._pool is None
    _nothing_left_running()
    gc.collect()
    assert staging and all(ref() is None for ref in staging), "staging slots outlived the error"
    nvc.out_of_memory = ""
    assert sorted(_frames(loader)) == _every_frame(index)
    assert loader.stats["skipped_files"] == []


def test_out_of_memory_mid_epoch_resumes_where_it_stopped(index, monkeypatch):
    """The fault comes after the first batch: the batches delivered before it and those of a
    new iteration once it is gone are the epoch, each frame once."""
    nvc = _fake_nvc.install_on_cpu(monkeypatch)
    loader = _loader(index, num_workers=0, prefetch=1, lookahead=1, nvdec_options={"frame_cache_bytes": 0})
    before = []
    with pytest.raises(GpuMemoryError):
        for batch in loader:
            before.append(batch)
            nvc.out_of_memory = "decode"
    assert 1 <= len(before) < len(loader)
    _nothing_left_running()
    nvc.out_of_memory = ""
    assert sorted(_frames(before) + _frames(loader)) == _every_frame(index)


def test_staging_that_does_not_fit_is_raised_not_skipped(index, monkeypatch):
    """The staging slots are the first GPU allocation of an iteration: when they do not fit,
    GpuMemoryError names them, whatever on_error says; the next iteration works."""
    _fake_nvc.install_on_cpu(monkeypatch)
    loader = _loader(index, num_workers=0)
    real_zeros, fault = torch.zeros, {"on": True}

    def zeros(*shape, **kwargs):  # staging slots are the only 5-D uint8 zeros
        if fault["on"] and kwargs.get("dtype") is torch.uint8 and len(shape[0]) == 5:
            raise torch.cuda.OutOfMemoryError(TORCH_OOM)
        return real_zeros(*shape, **kwargs)

    monkeypatch.setattr(torch, "zeros", zeros)
    with pytest.raises(GpuMemoryError, match=r"staging slots: \d+ slots of .* each"):
        list(loader)
    _nothing_left_running()
    fault["on"] = False
    assert sorted(_frames(loader)) == _every_frame(index)
