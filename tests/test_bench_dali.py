"""The DALI peer of ``vidloader bench`` (``dali``: ``fn.readers.video`` over a ``file_list``).

On every machine: how the shared plan becomes DALI's ``file_list`` lines (one per frame, per
clip, or per sequence of a sequential run), the least decoded count, and the whole peer with
DALI's reader replaced by a stand-in that decodes each line's sequence with PyAV, so the
batches are checked frame by frame against a full decode. The ``cuda`` tests run DALI itself
on the GPU machine (where ``nvidia-dali`` is installed).
"""

from __future__ import annotations

import dataclasses
import json
import sys
from fractions import Fraction

import numpy as np
import pytest
import torch

from vidloader.bench import WORKLOADS, RunConfig, Skip, load_index, prepare_dataset
from vidloader.bench._backends import make_peer, resolve_backends
from vidloader.bench._batching import assemble
from vidloader.bench._harness import run_backend
from vidloader.bench._peers import Job
from vidloader.bench._peers_dali import (
    DEFAULT_SEQUENCE,
    DaliPeer,
    DaliRequests,
    dali_requests,
    rebatch,
    run_sequence_length,
    uneven_timestamps,
)
from vidloader.bench._workloads import Geometry, make_plan
from vidloader.sampling import BatchPlan

from .media import reference_frames


@pytest.fixture(scope="module")
def w1(tmp_path_factory):
    ds = prepare_dataset("W1", "tiny", data_dir=tmp_path_factory.mktemp("bench-dali"))
    return ds, load_index(ds)


@pytest.fixture(scope="module")
def refs(w1):
    _, index = w1
    return {r.path: torch.from_numpy(reference_frames(r.path)) for r in index}


def _job(w1, workload: str, batch_size: int, *, batches: int = 3, seed: int = 5,
         geometry: Geometry | None = Geometry()) -> Job:
    ds, index = w1
    wl = WORKLOADS[workload]
    if geometry is not None:
        wl = dataclasses.replace(wl, geometry=geometry)
    plan = make_plan(wl, index, ds, batches=batches, seed=seed, batch_size=batch_size)
    return Job(plan.index, plan, wl, workers=0)


def _rows(requests: DaliRequests) -> list[tuple[int, int]]:
    """The (video, frame) rows the lines deliver, in order."""
    out = []
    for v, s, (lo, hi) in zip(requests.videos, requests.starts, requests.keep):
        out += [(int(v), int(s) + k * requests.stride) for k in range(lo, hi)]
    return out


def _bp(videos, frames, *, is_clip: bool = False) -> BatchPlan:
    videos = np.asarray(videos, np.int64)
    return BatchPlan(0, 0, videos, np.asarray(frames, np.int64),
                     np.zeros(len(videos), np.uint64), is_clip=is_clip)


def _plan_rows(batches) -> list[tuple[int, int]]:
    return [(int(v), int(f)) for bp in batches
            for v, fs in zip(bp.video_indices, bp.frame_indices) for f in fs]


class StandInDali(DaliPeer):
    """DALI's reader replaced by PyAV: each line's sequence from a full decode, delivered in
    DALI batches of ``requests.batch_size`` with its labels and first frames."""

    def __init__(self, refs, *, swap: int | None = None, stop_after: int | None = None):
        super().__init__()
        self.refs, self.swap, self.stop_after = refs, swap, stop_after

    def _sequences(self, job, requests):
        n = len(requests.starts)
        order = list(range(n))
        if self.swap is not None:
            order[self.swap], order[self.swap + 1] = order[self.swap + 1], order[self.swap]
        if self.stop_after is not None:
            order = order[: self.stop_after]
        for a in range(0, len(order), requests.batch_size):
            lines = order[a : a + requests.batch_size]
            video = torch.stack([
                self.refs[job.index[int(requests.videos[i])].path][
                    int(requests.starts[i]) : int(requests.starts[i]) + requests.span
                    : requests.stride]
                for i in lines])
            yield video, np.asarray(lines), requests.starts[lines]


# -- the plan as DALI's file_list -------------------------------------------------------------


def test_random_frames_are_one_line_each(w1):
    job = _job(w1, "random", 16)
    req = dali_requests(job.plan.batches, job.index)
    assert (req.mode, req.sequence_length, req.stride, req.batch_size) == ("frames", 1, 1, 16)
    assert _rows(req) == _plan_rows(job.plan.batches) and len(req.starts) == 48


def test_sequential_runs_become_sequences_that_cover_the_plan(w1):
    job = _job(w1, "sequential", 32, batches=6)
    req = dali_requests(job.plan.batches, job.index)
    assert req.mode == "runs" and req.sequence_length >= 8 and req.stride == 1
    assert _rows(req) == _plan_rows(job.plan.batches)  # every row once, in order
    frames = {r.path: r.num_frames for r in job.index}
    for v, s in zip(req.videos, req.starts):  # every sequence inside its video
        assert s >= 0 and s + req.sequence_length <= frames[job.index[int(v)].path]


def test_clips_are_one_line_each_with_the_plans_stride():
    rng = np.random.default_rng(0)
    starts = rng.integers(0, 20, 8)
    bp = _bp(np.arange(8) % 3, starts[:, None] + 2 * np.arange(4)[None, :], is_clip=True)
    index = [_rec(f"/v/{i}.mp4", 40, gop=10) for i in range(3)]
    req = dali_requests([bp, bp], index)
    assert (req.mode, req.sequence_length, req.stride, req.batch_size) == ("clips", 4, 2, 8)
    assert _rows(req) == _plan_rows([bp, bp])
    lines = req.file_list(index).splitlines()
    assert lines[1] == f"/v/1.mp4 1 {starts[1]} {starts[1] + 7}"  # end: first + span
    # each clip decodes from the keyframe at or before its start to its last frame
    assert req.least_decoded(index)[0] == starts[0] + 7 - (starts[0] // 10) * 10


def test_clips_with_uneven_steps_or_paths_with_spaces_are_skipped():
    index = [_rec("/v/a b.mp4", 40)]
    even = _bp([0], [[0, 2, 4]], is_clip=True)
    with pytest.raises(Skip, match="whitespace"):
        dali_requests([even], index)
    index[0].path = "/v/a.mp4"
    uneven = _bp([0], [[0, 2, 5]], is_clip=True)
    with pytest.raises(Skip, match="evenly spaced"):
        dali_requests([uneven], index)


def _rec(path: str, frames: int, *, gop: int = 30, pts=None):
    """A record-like object: ``frames`` frames at 30 frames/s, time base 1/15360."""
    return type("R", (), {"path": path, "num_frames": frames, "fps": 30.0,
                          "time_base": Fraction(1, 15360),
                          "keyframes": np.arange(0, frames, gop),
                          "pts": np.arange(frames) * 512 if pts is None else np.asarray(pts)})()


def _rows_plan(rows: list[tuple[int, int]], batch: int) -> list:
    return [_bp([v for v, _ in rows[a : a + batch]], [[f] for _, f in rows[a : a + batch]])
            for a in range(0, len(rows), batch)]


def test_a_run_reaching_its_videos_end_moves_its_last_sequence_back():
    index = [_rec(f"/v/{i}.mp4", 60) for i in range(3)]
    # runs: video 0 from frame 20 (cut by the plan's start), then whole videos 1, 2, 0
    rows = [(0, f) for f in range(20, 60)] + [(v, f) for v in (1, 2, 0) for f in range(60)]
    plan = _rows_plan(rows, 20)
    req = dali_requests(plan, index)
    assert req.mode == "runs" and req.sequence_length == 30
    assert _rows(req) == rows  # every planned row once, in order
    assert req.starts[1] == 30 and req.keep[1].tolist() == [20, 30]  # [50, 60) from [30, 60)
    assert np.all(req.starts + 30 <= 60) and np.all(req.keep[:, 0] >= 0)
    assert np.all(req.keep[:, 1] <= 30)


def test_a_video_shorter_than_the_sequences_shortens_them():
    index = [_rec("/v/a.mp4", 60), _rec("/v/b.mp4", 12)]
    rows = [(0, f) for f in range(60)] + [(1, f) for f in range(12)] + [(0, f) for f in range(60)]
    req = dali_requests(_rows_plan(rows, 12), index)
    assert req.sequence_length == 12 and _rows(req) == rows
    assert np.all(req.starts[req.videos == 1] + 12 <= 12)


def test_videos_whose_timestamps_are_not_evenly_spaced_are_skipped():
    even = _rec("/v/even.mp4", 40)
    assert uneven_timestamps(even) is None
    jittered = _rec("/v/jit.mp4", 40, pts=np.arange(40) * 512 + np.r_[0, 100, np.zeros(38)])
    assert uneven_timestamps(jittered) is None  # within a quarter period (128 ticks)
    dropped = _rec("/v/vfr.mp4", 40, pts=np.r_[np.arange(20) * 512, np.arange(21, 41) * 512])
    why = uneven_timestamps(dropped)
    assert why and "/v/vfr.mp4" in why and "frame 20" in why
    with pytest.raises(Skip, match="vfr.mp4"):
        dali_requests(_rows_plan([(0, 3), (0, 9)], 2), [dropped])


def test_sequence_length_for_runs():
    assert run_sequence_length(np.array([7, 60, 60, 60, 3])) == 30  # ends cut by the plan
    assert run_sequence_length(np.array([5, 64, 128, 9])) == 32
    assert run_sequence_length(np.array([1, 45, 30, 2])) == 15
    assert run_sequence_length(np.array([1, 7, 7, 2])) == DEFAULT_SEQUENCE  # no divisor >= 8


# -- the whole peer with a stand-in reader -----------------------------------------------------


def _expected(job, refs):
    return [assemble(bp, job.index, job.workload.geometry,
                     lambda rec, frames: refs[rec.path][torch.from_numpy(frames)])
            for bp in job.plan.batches]


@pytest.mark.parametrize("workload,batch_size", [("random", 16), ("sequential", 32)])
def test_batches_hold_the_planned_frames(w1, refs, workload, batch_size):
    job = _job(w1, workload, batch_size, batches=4)
    peer = StandInDali(refs)
    got = list(peer.batches(job))
    want = _expected(job, refs)
    assert len(got) == len(want) == 4
    for a, b in zip(got, want):
        assert a.shape == b.shape and torch.equal(a, b)
    counts = peer.counters()
    assert counts["delivered"] == 4 * batch_size
    assert counts["decoded"] >= counts["delivered"]
    json.dumps(peer.settings())
    assert peer.settings()["shape"]["mode"] == ("frames" if workload == "random" else "runs")


def test_clip_batches_hold_the_planned_clips(w1, refs):
    ds, index = w1
    wl = dataclasses.replace(WORKLOADS["clips"], geometry=Geometry())
    plan = make_plan(wl, index, ds, batches=3, seed=2, batch_size=4)
    job = Job(plan.index, plan, wl, workers=0)
    got = list(StandInDali(refs).batches(job))
    want = _expected(job, refs)
    assert [tuple(g.shape) for g in got] == [tuple(w.shape) for w in want]
    assert got[0].dim() == 5 and all(torch.equal(a, b) for a, b in zip(got, want))


def test_lines_out_of_order_or_missing_raise(w1, refs):
    job = _job(w1, "random", 16)
    with pytest.raises(RuntimeError, match="line 4 from frame .* was due"):
        list(StandInDali(refs, swap=4).batches(job))
    with pytest.raises(RuntimeError, match="stopped after 40 of 48 lines"):
        list(StandInDali(refs, stop_after=40).batches(job))


def test_rebatch_carries_frames_across_dali_batches():
    # sequences of 3 frames, 2 per DALI batch; plan batches of 4 rows
    req = DaliRequests("runs", 3, 1, np.zeros(4, np.int64), np.array([0, 3, 6, 9]),
                       np.array([[0, 3]] * 4), 2)
    frames = torch.arange(12).view(4, 3, 1, 1, 1).expand(4, 3, 1, 1, 3)
    seqs = [(frames[0:2], np.array([0, 1]), np.array([0, 3])),
            (frames[2:4], np.array([2, 3]), np.array([6, 9]))]
    plan = [_bp(np.zeros(4), np.arange(a, a + 4)[:, None]) for a in (0, 4, 8)]
    out = list(rebatch(iter(seqs), req, plan))
    assert [b[:, 0, 0, 0].tolist() for b, _ in out] == [[0, 1, 2, 3], [4, 5, 6, 7],
                                                        [8, 9, 10, 11]]
    assert [lines for _, lines in out] == [2, 3, 4]


# -- registry, settings and skips --------------------------------------------------------------


def test_registered_in_the_gpu_alias_with_settings():
    assert resolve_backends("gpu")[-1] == "dali"
    peer = make_peer("dali")
    assert isinstance(peer, DaliPeer) and peer.note.startswith("dali:")
    settings = peer.settings()
    json.dumps(settings)
    assert "fn.readers.video" in settings["api"] and "lower bound" in settings["decoded"]


def test_skipped_where_dali_does_not_import(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setitem(sys.modules, "nvidia.dali", None)  # importing it raises ImportError
    with pytest.raises(Skip, match="nvidia-dali"):
        make_peer("dali").check()


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA GPU")
def test_skipped_without_cuda(tmp_path):
    cfg = RunConfig("random", "dali", "W1", "tiny", str(tmp_path), batches=1, warmup=0,
                    workers=0)
    result = run_backend(cfg)
    assert result["status"] == "skipped" and "CUDA" in result["reason"]


# -- DALI itself, on the GPU machine -------------------------------------------------------------


def _ready() -> DaliPeer:
    peer = make_peer("dali")
    try:
        peer.check()
    except Skip as exc:
        pytest.skip(str(exc))
    return peer


#: Mean absolute difference per frame to the CPU decode at native size: NVDEC's pictures are
#: bit-exact, DALI's NV12 to RGB kernel is its own (as SPDL's, whose bound is 2.5).
_NATIVE_TOLERANCE = 3.0


@pytest.mark.cuda
@pytest.mark.parametrize("workload,batch_size", [("random", 24), ("sequential", 32)])
def test_dali_delivers_the_planned_frames(w1, refs, workload, batch_size):
    peer = _ready()
    job = _job(w1, workload, batch_size, batches=3)
    got = [b.cpu() for b in peer.batches(job)]
    worst = 0.0
    for b, bp in zip(got, job.plan.batches):
        assert b.shape == (batch_size, 270, 480, 3) and b.dtype == torch.uint8
        for row, v, f in zip(b, bp.video_indices, bp.frame_indices[:, 0]):
            ref = refs[job.index[int(v)].path]
            diffs = (ref.float() - row.float()).abs().mean(dim=(1, 2, 3))
            assert int(diffs.argmin()) == int(f), f"DALI's row holds frame {int(diffs.argmin())}, not {f}"
            worst = max(worst, float(diffs[int(f)]))
    assert worst < _NATIVE_TOLERANCE, f"mean difference {worst:.2f} to the CPU decode"
    assert peer.counters()["delivered"] == 3 * batch_size


@pytest.mark.cuda
def test_dali_runs_in_the_bench_with_its_settings(w1):
    _ready()
    ds, _ = w1
    for workload, shape in [("sequential", [32, 224, 224, 3]), ("random", [32, 224, 224, 3])]:
        cfg = RunConfig(workload, "dali", "W1", "tiny", str(ds.root.parent), batches=3,
                        warmup=0, workers=4, batch_size=32, max_seconds=None)
        result = run_backend(cfg)
        assert result["status"] == "ok", result.get("traceback") or result.get("reason")
        assert result["batch_shape"] == shape
        assert result["peer_settings"]["shape"]["mode"] in ("runs", "frames")
        assert result["decoded_per_delivered"] >= 1.0
