"""The SPDL and PyAV-with-NVDEC peers of ``vidloader bench`` (``spdl``, ``pyav-nvdec``).

On a machine without CUDA (CI) they must report themselves skipped with a reason; their
registry entries, settings, window rule and thread-pool machinery are checked here anyway (the
PyAV peer's whole pipeline runs on the CPU with the hwaccel left out). The ``cuda`` tests run
each on the GPU machine against the CPU decode of the same files.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from fractions import Fraction
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from vidloader.bench import WORKLOADS, RunConfig, Skip, load_index, prepare_dataset
from vidloader.bench._backends import PEERS, make_peer, resolve_backends
from vidloader.bench._harness import run_backend
from vidloader.bench._peers import Job
from vidloader.bench._peers_gpu import (
    TORCHCODEC_OPEN_PER_THREAD,
    PyavNvdecPeer,
    _runs,
    _spdl_window,
    least_decoded,
)
from vidloader.bench._workloads import Geometry, make_plan

from .media import reference_frames

NEW = ("spdl", "pyav-nvdec")


@pytest.fixture(scope="module")
def w1(tmp_path_factory):
    ds = prepare_dataset("W1", "tiny", data_dir=tmp_path_factory.mktemp("bench-data"))
    return ds, load_index(ds)


def _job(w1, workload: str, batch_size: int, *, batches: int = 2, workers: int = 2,
         geometry: Geometry | None = None, seed: int = 3) -> Job:
    ds, index = w1
    wl = WORKLOADS[workload]
    if geometry is not None:
        wl = dataclasses.replace(wl, geometry=geometry)
    plan = make_plan(wl, index, ds, batches=batches, seed=seed, batch_size=batch_size)
    return Job(plan.index, plan, wl, workers=workers)


def _mean_diff(a, b) -> float:
    return float((a.float() - b.float()).abs().mean())


# -- registry, settings and skips: every machine -----------------------------------------------


def test_registered_and_in_the_gpu_alias():
    assert {"spdl", "pyav-nvdec"} <= set(PEERS)
    gpu = resolve_backends("gpu")
    assert gpu[-3:] == ["spdl", "pyav-nvdec", "dali"] and "pynvc-threads" in gpu
    assert resolve_backends("spdl,pyav-nvdec,spdl") == ["spdl", "pyav-nvdec"]
    for name in NEW:
        peer = make_peer(name)
        assert peer.name == name and not peer.ceiling and peer.note.startswith(name + ":")


def test_settings_say_how_the_library_is_configured():
    spdl, pyav = make_peer("spdl").settings(), make_peer("pyav-nvdec").settings()
    json.dumps([spdl, pyav])  # they go into the run's JSON as they are
    assert "decode_packets_nvdec" in spdl["api"] and "caching_allocator" in spdl["device_config"]
    assert "NVDEC's scaler" in spdl["resize"] and "BT.601" in spdl["colour"]
    assert "allow_software_fallback=False" in pyav["hwaccel"] and "current_ctx" in pyav["hwaccel"]
    assert "host memory" in pyav["download"] and "torch on the GPU" in pyav["resize"]
    assert {"version", "ahead"} <= set(spdl) & set(pyav)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA GPU")
@pytest.mark.parametrize("name", NEW)
def test_skipped_without_cuda_with_the_reason(name, tmp_path):
    with pytest.raises(Skip, match="CUDA"):
        make_peer(name).check()
    cfg = RunConfig("random", name, "W1", "tiny", str(tmp_path), batches=1, warmup=0, workers=0)
    result = run_backend(cfg)  # skipped before any dataset is built
    assert result["status"] == "skipped" and "CUDA" in result["reason"]
    assert result["peer_settings"] == make_peer(name).settings() and result["note"]


def test_spdl_skipped_where_it_does_not_import(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setitem(sys.modules, "spdl.io", None)  # importing it raises ImportError
    with pytest.raises(Skip, match="spdl-io"):
        make_peer("spdl").check()


def test_pyav_skipped_where_its_ffmpeg_has_no_cuda_hwaccel(monkeypatch):
    hwaccel = pytest.importorskip("av.codec.hwaccel")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(hwaccel, "hwdevices_available", lambda: ["vaapi"])
    with pytest.raises(Skip, match="no CUDA hwaccel"):
        make_peer("pyav-nvdec").check()


# -- the window rule --------------------------------------------------------------------------


def test_runs_restart_at_a_keyframe_only_when_that_decodes_less():
    kf = np.array([0, 30, 60])
    f = np.array([3, 5, 29, 31, 58, 62])
    # 5 and 29 share 3's GOP; 31: going on from 29 decodes 2 frames, a restart at 30 decodes
    # 1 + the restart cost; 58 shares 31's GOP; 62: going on from 58 decodes 4, a restart at
    # 60 decodes 2 + the cost: it goes on with a cost of 2 and restarts with a cost of 1.
    assert _runs(kf, f, 2) == [(0, 6)]
    assert _runs(kf, f, 1) == [(0, 5), (5, 6)]
    assert _runs(kf, np.array([2, 45]), 9) == [(0, 1), (1, 2)]  # 43 on against 15 + 9
    assert _runs(kf, np.array([25, 33]), 9) == [(0, 2)]  # 8 on against 3 + 9
    assert _runs(kf, np.array([30, 40]), 0) == [(0, 2)]  # same GOP: never split
    assert _runs(kf, np.array([], np.int64), 2) == []


def test_spdl_window_holds_exactly_the_wanted_frames():
    rec = SimpleNamespace(time_base=Fraction(1, 19200), pts=np.arange(60) * 640)
    start, end = _spdl_window(rec, 5, 9)
    assert (start, end) == (Fraction(5 * 640, 19200), Fraction(9 * 640 + 1, 19200))
    kept = [i for i, p in enumerate(rec.pts) if start <= Fraction(int(p), 19200) < end]
    assert kept == [5, 6, 7, 8, 9]


# -- the thread-pool machinery, on the CPU: the PyAV peer without its hwaccel -------------------


class _PyavOnCpu(PyavNvdecPeer):
    """``pyav-nvdec`` with FFmpeg's software decoder and batches on the CPU: everything but
    the hwaccel and the device."""

    device = "cpu"

    def check(self) -> None:
        import av

        self.av = av

    def _make_hwaccel(self):
        return None


@pytest.mark.parametrize("workload,batch_size", [("random", 24), ("sequential", 32)])
def test_pool_peer_delivers_what_the_naive_loader_does(w1, workload, batch_size):
    job = _job(w1, workload, batch_size, batches=4)
    peer = _PyavOnCpu()
    peer.check()
    depth, cycle = peer.pipeline(job)
    assert depth >= 2 and cycle >= 1
    got = [b.clone() for b in peer.batches(job)]
    ref = [b.clone() for b in make_peer("naive").batches(dataclasses.replace(job, workers=0))]
    assert [tuple(b.shape) for b in got] == [(batch_size, 224, 224, 3)] * 4
    for a, b in zip(got, ref):  # the same decode, RGB conversion and torch resize
        assert torch.equal(a, b)
    assert _mean_diff(got[0], ref[1]) > 5  # and the check can fail
    counts = peer.counters()
    assert counts["delivered"] == 4 * batch_size and counts["decoded"] >= len(
        {(int(v), int(f)) for bp in job.plan.batches
         for v, f in zip(bp.video_indices, bp.frame_indices[:, 0])})
    assert peer.formats_seen == {"yuv420p"}  # software frames here; NVDEC's come as nv12


def test_pool_peer_stops_cleanly_when_the_consumer_does(w1):
    job = _job(w1, "random", 16, batches=6, workers=3)
    peer = _PyavOnCpu()
    peer.check()
    gen = peer.batches(job)
    first = next(gen)
    gen.close()  # the harness closes early at the end of its window
    assert first.shape == (16, 224, 224, 3) and peer.counters()["delivered"] == 16


# -- on the GPU machine -----------------------------------------------------------------------


def _ready(name: str):
    peer = make_peer(name)
    try:
        peer.check()
    except Skip as exc:
        # VIDLOADER_FAIL_WITHOUT_CUDA is about the GPU: a peer whose own library is not
        # installed, or whose FFmpeg PyNvVideoCodec's already shadows (the usual all-cuda-tests
        # run imports PyNvVideoCodec first), is skipped, as on any machine without it.
        if os.environ.get("VIDLOADER_FAIL_WITHOUT_CUDA") and "CUDA" in str(exc):
            pytest.fail(f"{name} skipped on the GPU machine: {exc}")
        pytest.skip(str(exc))
    return peer


#: Mean absolute difference per frame to the CPU decode at native size. PyAV's frames are
#: FFmpeg's decode (NVDEC's planes are bit-exact) converted from NV12 by swscale without
#: vidloader's full chroma interpolation; SPDL's kernel takes chroma nearest-neighbour and
#: truncates. Simulated on the CPU on W1 tiny: 1.2 and 1.5 at most, while neighbouring
#: frames differ by 5.6 or more.
_NATIVE_TOLERANCE = {"pyav-nvdec": 2.0, "spdl": 2.5}


@pytest.mark.cuda
@pytest.mark.parametrize("name", NEW)
def test_delivers_the_planned_frames_at_native_size(w1, name):
    peer = _ready(name)
    job = _job(w1, "random", 24, batches=3, workers=4, geometry=Geometry())
    got = [b.cpu() for b in peer.batches(job)]
    refs = {}
    worst = 0.0
    for b, bp in zip(got, job.plan.batches):
        assert b.shape == (24, 270, 480, 3) and b.dtype == torch.uint8
        for row, v, f in zip(b, bp.video_indices, bp.frame_indices[:, 0]):
            rec = job.index[int(v)]
            if rec.path not in refs:
                refs[rec.path] = torch.from_numpy(reference_frames(rec.path))
            diffs = (refs[rec.path].float() - row.float()).abs().mean(dim=(1, 2, 3))
            best = int(diffs.argmin())
            assert best == int(f), f"{name}: the row holds frame {best}, not {f}"
            worst = max(worst, float(diffs[int(f)]))
    assert worst < _NATIVE_TOLERANCE[name], f"{name}: mean difference {worst:.2f} to the CPU decode"
    counts = peer.counters()
    assert counts["delivered"] == 72 and counts["decoded"] > 0 and counts["tasks"] > 0
    if name == "pyav-nvdec":
        assert peer.formats_seen == {"nv12"}  # every frame came from NVDEC


#: Mean absolute difference of a 224×224 batch to vidloader's CPU backend (swscale's resize
#: inside FFmpeg). PyAV's path simulated on the CPU on W1 tiny (NV12 to RGB by swscale, torch's
#: antialiased resize): 1.49. SPDL's frames are scaled by NVDEC, whose filter is not
#: documented: a nearest-neighbour resize alone gives 3.2 there, SPDL's colour conversion
#: about 1.5 more. Frames of another batch differ by 80.
_RESIZED_TOLERANCE = {"pyav-nvdec": 3.0, "spdl": 8.0}


@pytest.mark.cuda
@pytest.mark.parametrize("name", NEW)
def test_resized_frames_agree_with_vidloader(w1, name):
    peer = _ready(name)
    job = _job(w1, "random", 24, batches=2, workers=4)
    got = [b.cpu() for b in peer.batches(job)]
    ref = [b.clone() for b in make_peer("vidloader").batches(dataclasses.replace(job, workers=0))]
    assert [tuple(b.shape) for b in got] == [(24, 224, 224, 3)] * 2
    for a, b in zip(got, ref):
        d = _mean_diff(a, b)
        assert d < _RESIZED_TOLERANCE[name], f"{name}: mean difference {d:.2f} to vidloader"
        assert d < 0.5 * _mean_diff(a, ref[1] if b is ref[0] else ref[0])  # the right frames


@pytest.mark.cuda
@pytest.mark.parametrize("name", NEW)
def test_a_run_reports_settings_and_counts(w1, name):
    _ready(name)
    ds, _ = w1
    cfg = RunConfig("sequential", name, "W1", "tiny", str(ds.root.parent), batches=3, warmup=0,
                    workers=4, batch_size=32, max_seconds=None)
    result = run_backend(cfg)
    assert result["status"] == "ok", result.get("traceback") or result.get("reason")
    assert result["peer_settings"] == make_peer(name).settings()
    assert result["decode_counts"]["delivered"] > 0 and result["decoded_per_delivered"] >= 1.0
    assert result["batch_shape"] == [32, 224, 224, 3]


# -- torchcodec on CUDA: every machine (no CUDA build of torchcodec is installable here) ---------


class _FakeTorchcodec:
    """``torchcodec.decoders`` as a CPU-only build behaves (``cuda_ok=False``: "Unsupported
    device: cuda", seen on the GPU machine with 0.11.1+cpu) or as one that decodes: every
    frame of the file by PyAV, ``get_frames_at`` picking the wanted ones (NHWC uint8) and
    counting what a decoder would decode (from the keyframe, unless the frame lies ahead in
    the GOP it stopped in), on the thread that opened it."""

    def __init__(self, cuda_ok: bool, error: Exception | None = None):
        import threading

        self.cuda_ok, self.decoded, self.alive, self.peak = cuda_ok, 0, 0, 0
        fake = self

        class VideoDecoder:
            def __init__(self, path, *, stream_index, device, seek_mode, dimension_order):
                if error is not None:
                    raise error
                if device.startswith("cuda") and not fake.cuda_ok:
                    raise RuntimeError("Unsupported device: cuda")
                assert (seek_mode, dimension_order) == ("exact", "NHWC")
                self.thread, self.last = threading.get_ident(), None
                self.frames = torch.from_numpy(reference_frames(path))
                self.keyframes = sorted({int(k) for k in fake.keyframes[path]})
                fake.alive += 1
                fake.peak = max(fake.peak, fake.alive)

            def __del__(self):
                if hasattr(self, "thread"):
                    fake.alive -= 1

            def get_frames_at(self, indices):
                assert threading.get_ident() == self.thread, "a decoder used off its thread"
                assert indices == sorted(indices)
                for f in indices:  # on from the last frame in its GOP, else from a seek
                    kf = max(k for k in self.keyframes if k <= f)
                    on = self.last is not None and kf <= self.last < f
                    fake.decoded += f - self.last if on else f - kf + 1
                    self.last = f
                return SimpleNamespace(data=self.frames[indices])

        self.VideoDecoder = VideoDecoder


def test_torchcodec_cuda_is_a_gpu_peer():
    assert "torchcodec-cuda" in PEERS and "torchcodec-cuda" in resolve_backends("gpu")
    peer = make_peer("torchcodec-cuda")
    assert peer.note.startswith("torchcodec-cuda:") and not peer.ceiling
    settings = peer.settings()
    json.dumps(settings)
    assert settings["device"] == "cuda" and "get_frames_at" in settings["api"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA GPU")
def test_torchcodec_cuda_skipped_without_cuda(tmp_path):
    cfg = RunConfig("random", "torchcodec-cuda", "W1", "tiny", str(tmp_path), batches=1, warmup=0,
                    workers=0)
    result = run_backend(cfg)
    assert result["status"] == "skipped" and "CUDA" in result["reason"]


def test_torchcodec_cuda_says_where_its_cuda_builds_come_from(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setitem(sys.modules, "torchcodec.decoders", None)  # importing it raises ImportError
    with pytest.raises(Skip, match="torchcodec.*PyTorch's wheel index"):
        make_peer("torchcodec-cuda").check()


def test_torchcodec_cuda_says_why_a_cpu_build_cannot_run(w1):
    """A CPU-only build refuses ``device="cuda"`` when the first decoder is made: the run is
    skipped, its reason naming torchcodec's error and where CUDA builds come from."""
    peer = make_peer("torchcodec-cuda")
    peer.decoders = _FakeTorchcodec(cuda_ok=False)
    with pytest.raises(Skip, match=r"Unsupported device: cuda.*PyTorch's wheel index"):
        next(peer.batches(_job(w1, "random", 8, batches=1)))


@pytest.mark.parametrize("workload,batch_size", [("random", 24), ("sequential", 32)])
def test_torchcodec_cuda_delivers_what_the_naive_loader_does(w1, workload, batch_size):
    """The adapter's pipeline on the CPU (its device set to "cpu", torchcodec faked by PyAV's
    decode): the naive loader's frames, and the least decoded counted from keyframes."""
    job = _job(w1, workload, batch_size, batches=3)
    peer = make_peer("torchcodec-cuda")
    peer.device, peer.decoders = "cpu", _FakeTorchcodec(cuda_ok=True)
    peer.decoders.keyframes = {rec.path: rec.keyframes for rec in w1[1]}
    got = [b.clone() for b in peer.batches(job)]
    ref = [b.clone() for b in make_peer("naive").batches(dataclasses.replace(job, workers=0))]
    assert len(got) == 3
    for a, b in zip(got, ref):
        assert torch.equal(a, b)
    assert _mean_diff(got[0], ref[1]) > 5
    counts = peer.counters()
    assert counts["delivered"] == 3 * batch_size and counts["decoded"] == peer.decoders.decoded
    # each thread holds a few decoders at most, and none outlives the run (the probe included)
    import gc

    gc.collect()
    # (a thread opens its next decoder before it closes its oldest: one more for a moment)
    assert 2 <= peer.decoders.peak <= job.workers * (TORCHCODEC_OPEN_PER_THREAD + 1)
    assert peer.decoders.alive == 0


def test_torchcodec_cuda_fails_on_what_is_not_a_missing_cuda_build(w1):
    """Only "Unsupported device" makes a skip: another error at the probe is a failed run."""
    peer = make_peer("torchcodec-cuda")
    peer.decoders = _FakeTorchcodec(cuda_ok=True, error=TypeError("unexpected keyword 'seek_mode'"))
    with pytest.raises(TypeError, match="seek_mode"):
        next(peer.batches(_job(w1, "random", 8, batches=1)))


def test_least_decoded_counts_each_span_from_its_keyframe_once():

    keyframes = np.array([0, 10, 20])
    assert least_decoded(keyframes, np.array([], dtype=np.int64)) == 0
    assert least_decoded(keyframes, np.array([3])) == 4  # 0..3
    assert least_decoded(keyframes, np.array([3, 5])) == 6  # 0..5, once
    assert least_decoded(keyframes, np.array([3, 12])) == 4 + 3  # 0..3 and 10..12
    assert least_decoded(keyframes, np.array([3, 9, 12])) == 13  # 0..12: the spans touch
    assert least_decoded(keyframes, np.array([25])) == 6  # 20..25
    # a decoder that stopped at 22 goes on to 25 (3 frames); one at 8 or 27 seeks to 20
    assert least_decoded(keyframes, np.array([25]), after=22) == 3
    assert least_decoded(keyframes, np.array([25]), after=8) == 6
    assert least_decoded(keyframes, np.array([25]), after=27) == 6
