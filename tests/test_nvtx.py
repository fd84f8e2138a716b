"""NVTX ranges (``VideoLoader(nvtx=True)`` / ``VIDLOADER_NVTX=1``): off by default and free, a
no-op on a CPU build of torch, and, when on, ranges that nest properly on each thread and come
in the order the work is done, through real loader epochs on the CPU and with the fake NVDEC.

On the CPU the ranges are recorded by patching ``torch.cuda.nvtx.range_push``/``range_pop``
(the CPU build has only a stub that raises); the ``cuda`` tests run the real binding.
"""

from __future__ import annotations

import collections
import os
import subprocess
import sys
import threading

import numpy as np
import pytest
import torch

import vidloader
from vidloader import RandomFrames, VideoLoader
from vidloader._utils import _nvtx
from vidloader.synthetic import VideoSpec, make_dataset

from . import _fake_nvc
from .media import collect_batches

SPECS = [VideoSpec(width=64, height=48, num_frames=20 + 4 * i, gop=10, bframes=2, seed=40 + i)
         for i in range(2)]


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    root = tmp_path_factory.mktemp("nvtx")
    paths = make_dataset(root, SPECS, names=[f"v{i}.mp4" for i in range(len(SPECS))], num_workers=1)
    return vidloader.build_index(paths, num_workers=0, progress=False)


class Recorder:
    """Stands in for ``torch.cuda.nvtx.range_push``/``range_pop``: records each call with its
    thread, and gives each thread's ranges as ``(name, parent)`` in the order entered."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, str | None]] = []  # (thread, name) or (thread, None): a pop

    def push(self, message: str) -> int:
        self.calls.append((threading.get_ident(), message))
        return 0

    def pop(self) -> int:
        self.calls.append((threading.get_ident(), None))
        return 0

    def by_thread(self) -> dict[int, list[tuple[str, str | None]]]:
        stacks: dict[int, list[str]] = collections.defaultdict(list)
        entered: dict[int, list[tuple[str, str | None]]] = collections.defaultdict(list)
        for thread, name in self.calls:
            stack = stacks[thread]
            if name is None:
                assert stack, "range_pop without a range_push on its thread"
                stack.pop()
                continue
            entered[thread].append((name, stack[-1] if stack else None))
            stack.append(name)
        assert not any(stacks.values()), f"ranges left open: {dict(stacks)}"
        return dict(entered)

    def names(self) -> list[str]:
        return [n.split(" ")[0] for _, n in self.calls if n is not None]


@pytest.fixture
def recorder(monkeypatch):
    """NVTX 'available' (as on a CUDA build), with every range recorded."""
    rec = Recorder()
    monkeypatch.delenv(_nvtx.NVTX_ENV, raising=False)
    monkeypatch.setattr(_nvtx, "nvtx_available", lambda: True)
    monkeypatch.setattr(torch.cuda.nvtx, "range_push", rec.push)
    monkeypatch.setattr(torch.cuda.nvtx, "range_pop", rec.pop)
    return rec


def _frames(batches) -> list[np.ndarray]:
    return [b["frames"].numpy() for b in batches]


def test_environment_variable_is_parsed_explicitly(monkeypatch):
    monkeypatch.delenv(_nvtx.NVTX_ENV, raising=False)
    assert _nvtx.nvtx_requested(None) is False
    for text, want in (("1", True), ("on", True), ("0", False), ("false", False)):
        monkeypatch.setenv(_nvtx.NVTX_ENV, text)
        assert _nvtx.nvtx_requested(None) is want
        assert _nvtx.nvtx_requested(not want) is (not want)  # the argument wins
    monkeypatch.setenv(_nvtx.NVTX_ENV, "maybe")
    with pytest.raises(vidloader.ConfigError, match="VIDLOADER_NVTX='maybe'"):
        _nvtx.nvtx_requested(None)


def test_off_is_one_shared_no_op_and_wrap_returns_the_function_itself():
    ranges = _nvtx.Ranges(False)
    assert ranges("vidloader.decode", object()) is _nvtx.OFF
    fn = len
    assert ranges.wrap("vidloader.convert", fn) is fn


def test_bad_flag_is_refused_at_construction(index):
    with pytest.raises(vidloader.ConfigError, match="nvtx must be True, False or None"):
        VideoLoader(index, nvtx="yes", num_workers=0)


@pytest.mark.skipif(_nvtx.nvtx_available(), reason="a CUDA build of torch has NVTX")
def test_flag_is_a_no_op_on_a_cpu_build(index, monkeypatch):
    rec = Recorder()
    monkeypatch.setattr(torch.cuda.nvtx, "range_push", rec.push)
    monkeypatch.setattr(torch.cuda.nvtx, "range_pop", rec.pop)
    kw = dict(sampler=RandomFrames(seed=1), batch_size=8, num_workers=0)
    on = VideoLoader(index, nvtx=True, **kw)
    assert on.config.nvtx is False
    got, want = _frames(collect_batches(on)), _frames(collect_batches(VideoLoader(index, **kw)))
    assert all(np.array_equal(a, b) for a, b in zip(got, want)) and len(got) == len(want)
    assert rec.calls == []


def test_cpu_epoch_ranges_nest_and_come_in_order(index, recorder):
    loader = VideoLoader(index, sampler=RandomFrames(seed=1), batch_size=8, num_workers=0,
                         lookahead=1, prefetch=1, nvtx=True)  # one slot: decode b, collect b
    assert loader.config.nvtx and loader.config.executor_options("cpu")["nvtx"] is True
    batches = collect_batches(loader)
    plain = collect_batches(VideoLoader(index, sampler=RandomFrames(seed=1), batch_size=8,
                                        num_workers=0, lookahead=1))
    assert all(np.array_equal(a, b) for a, b in zip(_frames(batches), _frames(plain)))

    (main,) = recorder.by_thread().values()  # num_workers=0: all on this thread
    kinds = [(n.split(" ")[0], p and p.split(" ")[0]) for n, p in main]
    assert set(kinds) == {("vidloader.decode", None), ("vidloader.convert", "vidloader.decode"),
                          ("vidloader.collect", None), ("vidloader.copy", "vidloader.collect"),
                          ("vidloader.finalize", "vidloader.collect")}
    # One convert per frame delivered; each batch decoded, then collected (copy, then finalize).
    assert kinds.count(("vidloader.convert", "vidloader.decode")) == loader.decode_stats.delivered
    collects = [n for n, _ in main if n.startswith("vidloader.collect")]
    assert collects == [f"vidloader.collect {b}" for b in range(len(batches))]
    for b in range(len(batches)):
        at = [i for i, (n, _) in enumerate(main) if n == f"vidloader.collect {b}"][0]
        assert [n for n, _ in main[at + 1:at + 3]] == ["vidloader.copy frames", "vidloader.finalize frames"]
        assert kinds[at - 1][0] == "vidloader.convert"  # batch b was just decoded
    assert kinds[0][0] == "vidloader.decode"
    assert all(n.split(" ", 1)[1] in {r.path for r in index} for n, _ in main
               if n.startswith("vidloader.decode"))


def test_environment_variable_switches_the_ranges_on(index, recorder, monkeypatch):
    monkeypatch.setenv(_nvtx.NVTX_ENV, "1")
    collect_batches(VideoLoader(index, batch_size=16, num_workers=0))
    assert "vidloader.decode" in recorder.names()
    recorder.calls.clear()
    collect_batches(VideoLoader(index, batch_size=16, num_workers=0, nvtx=False))
    assert recorder.calls == []


@pytest.fixture
def fake(monkeypatch):
    return _fake_nvc.install_on_cpu(monkeypatch)


def test_nvdec_ranges_on_decoder_threads_and_the_loader_thread(index, fake, recorder):
    """The fake NVDEC runs the real executor: each GOP is demuxed (or taken from the packet
    cache), decoded and converted on a decoder thread; the loader's thread waits and collects."""
    kw = dict(sampler=RandomFrames(seed=2), batch_size=8, backend="nvdec", num_workers=0,
              device="cpu", nvdec_decoders=2)
    loader = VideoLoader(index, nvtx=True, **kw)
    assert loader.config.executor_options("nvdec")["nvtx"] is True
    batches = collect_batches(loader)
    threads = recorder.by_thread()
    main = threads.pop(threading.get_ident())
    assert {n.split(" ")[0] for n, _ in main} == {"vidloader.wait", "vidloader.collect",
                                                  "vidloader.copy", "vidloader.finalize"}
    assert [n for n, _ in main if n.startswith("vidloader.collect")] == [
        f"vidloader.collect {b}" for b in range(len(batches))]
    assert 1 <= len(threads) <= 2  # the decoder threads
    decodes = 0
    for entered in threads.values():
        names = [n.split(" ")[0] for n, parent in entered if parent is None]
        assert set(names) <= {"vidloader.demux", "vidloader.decode", "vidloader.convert"}
        # A GOP is demuxed (cache miss) before it is decoded, and converted after.
        for i, name in enumerate(names):
            if name == "vidloader.demux":
                assert names[i + 1] == "vidloader.decode"
            if name == "vidloader.decode":
                assert names[i + 1] == "vidloader.convert"
                decodes += 1
    assert decodes == loader.decode_stats.seeks > 0
    plain = collect_batches(VideoLoader(index, **kw))
    assert all(np.array_equal(a, b) for a, b in zip(_frames(batches), _frames(plain)))


def test_demux_worker_ranges_name_each_file(index, recorder):
    """Separation mode's demux runs in worker processes, out of reach of the recorder: the
    function they run, here, opens one range per task."""
    from vidloader.decoding.nvdec import ContainerCache
    from vidloader.pipeline._demux import demux_tasks
    from vidloader.planning import plan_tasks

    plan = RandomFrames(seed=0).plan_epoch(index, epoch=0, batch_size=16).batch(0)
    tasks = plan_tasks([plan], index)
    containers = ContainerCache()
    try:
        bundles, _ = demux_tasks(tasks, containers, False, None, _nvtx.Ranges(True))
    finally:
        containers.close()
    assert all(b is not None for b in bundles)
    assert [n for n, _ in recorder.by_thread()[threading.get_ident()]] == [
        f"vidloader.demux {t.record.path}" for t in tasks]


# -- the real thing (device machine) ------------------------------------------------------

_PROBE = """
import ctypes, torch
torch.cuda.nvtx.range_push("probe"); torch.cuda.nvtx.range_pop()
cuda = ctypes.CDLL("libcuda.so.1")
dev, flags, active = ctypes.c_int(), ctypes.c_uint(), ctypes.c_int()
assert cuda.cuInit(0) == 0 and cuda.cuDeviceGet(ctypes.byref(dev), 0) == 0
def state():
    assert cuda.cuDevicePrimaryCtxGetState(dev, ctypes.byref(flags), ctypes.byref(active)) == 0
    return active.value
before = state()
torch.zeros(1, device="cuda")
print(before, int(torch.cuda.is_initialized()), state())
"""


@pytest.mark.cuda
def test_nvtx_creates_no_cuda_context():
    """So CPU workers may emit ranges: after a real range push/pop the process has no CUDA
    context; the control (a tensor on the GPU) shows the probe sees one when there is."""
    out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True,
                         timeout=120, env={**os.environ, "CUDA_VISIBLE_DEVICES": "0"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["0", "1", "1"]


@pytest.mark.cuda
@pytest.mark.parametrize("backend,workers", [("nvdec", 2), ("cpu", 2), ("combo", 2)])
def test_real_nvtx_through_a_gpu_epoch(index, monkeypatch, backend, workers):
    """The real binding, wrapped to count calls: every range pushed is popped, on every thread,
    and the batches equal those without ranges."""
    rec = Recorder()
    real_push, real_pop = torch.cuda.nvtx.range_push, torch.cuda.nvtx.range_pop
    monkeypatch.setattr(torch.cuda.nvtx, "range_push", lambda m: (rec.push(m), real_push(m))[1])
    monkeypatch.setattr(torch.cuda.nvtx, "range_pop", lambda: (rec.pop(), real_pop())[1])
    kw = dict(sampler=RandomFrames(seed=4), batch_size=8, backend=backend, num_workers=workers,
              device="cuda")
    loader = VideoLoader(index, nvtx=True, **kw)
    assert loader.config.nvtx
    got = [b["frames"].cpu().numpy() for b in collect_batches(loader)]
    rec.by_thread()  # balanced on every thread
    assert {"vidloader.collect", "vidloader.copy", "vidloader.finalize"} <= set(rec.names())
    if backend != "cpu":
        assert {"vidloader.decode", "vidloader.convert"} <= set(rec.names())
    want = [b["frames"].cpu().numpy() for b in collect_batches(VideoLoader(index, **kw))]
    assert all(np.array_equal(a, b) for a, b in zip(got, want)) and len(got) == len(want)
