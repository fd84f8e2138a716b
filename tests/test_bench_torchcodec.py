"""The torchcodec adapters of ``vidloader bench`` (``torchcodec``, ``torchcodec-tuned``): the
planned frames, decoder-native resize and crop, both batch APIs, and their settings in the
run's JSON. Skipped where torchcodec does not import (CI; it needs an FFmpeg of major 8 or
lower, see ``benchmarks/results/cpu/torchcodec/NOTE.md``)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from vidloader.bench import WORKLOADS, RunConfig, Skip, load_index, prepare_dataset
from vidloader.bench._backends import make_peer, resolve_backends
from vidloader.bench._harness import run_backend
from vidloader.bench._peers import Job
from vidloader.bench._peers_cpu import TorchcodecSettings, _TorchcodecReader
from vidloader.bench._workloads import make_plan


@pytest.fixture(scope="module")
def w1(tmp_path_factory):
    ds = prepare_dataset("W1", "tiny", data_dir=tmp_path_factory.mktemp("bench-data"))
    return ds, load_index(ds)


def _need_torchcodec() -> None:
    try:
        make_peer("torchcodec-tuned").check()
    except Skip as exc:
        pytest.skip(str(exc))


def _job(w1, workload: str, batch_size: int) -> Job:
    ds, index = w1
    plan = make_plan(WORKLOADS[workload], index, ds, batches=2, seed=3, batch_size=batch_size)
    return Job(plan.index, plan, WORKLOADS[workload], workers=0)


def _mean_diff(a, b) -> float:
    return float((a.float() - b.float()).abs().mean())


def test_tuned_is_in_the_cpu_alias_and_records_its_settings():
    assert resolve_backends("cpu")[-2:] == ["torchcodec", "torchcodec-tuned"]
    plain, tuned, approx = (make_peer(n).settings() for n in
                            ("torchcodec", "torchcodec-tuned", "torchcodec-approx"))
    assert (plain["seek_mode"], plain["native_resize"]) == ("exact", False)
    assert (tuned["seek_mode"], tuned["native_resize"]) == ("exact", True)
    assert approx == {**tuned, "seek_mode": "approximate"}
    assert tuned["num_ffmpeg_threads"] == 1 and tuned["device"] == "cpu"


def test_settings_reach_the_result(w1):
    ds, _ = w1
    cfg = RunConfig("random", "torchcodec-approx", "W1", "tiny", str(ds.root.parent), batches=1,
                    warmup=0, workers=0)
    result = run_backend(cfg)  # skipped or ok: the settings are there either way
    assert result["peer_settings"]["native_resize"] is True


@pytest.mark.parametrize("workload,batch_size,shape", [
    ("random", 12, (12, 224, 224, 3)),
    ("clips", 2, (2, 16, 112, 112, 3)),  # short side 128, then a centre crop, in the decoder
])
@pytest.mark.parametrize("backend", ["torchcodec-tuned", "torchcodec-approx"])
def test_tuned_resizes_in_the_decoder_like_vidloader(w1, workload, batch_size, shape, backend):
    _need_torchcodec()
    job = _job(w1, workload, batch_size)
    ref = [b.clone() for b in make_peer("vidloader").batches(job)]
    got = [b.clone() for b in make_peer(backend).batches(job)]
    assert [tuple(b.shape) for b in got] == [shape] * 2
    for a, b in zip(got, ref):  # FFmpeg's and torch's bilinear antialiased resize agree closely
        assert _mean_diff(a, b) < 2.0
    assert _mean_diff(got[0], ref[1]) > 5  # and the check can fail


@pytest.mark.parametrize("settings", [
    TorchcodecSettings(seek_mode="approximate"),
    TorchcodecSettings(api="played_at"),
    TorchcodecSettings(seek_mode="approximate", api="played_at", num_ffmpeg_threads=0),
])
def test_seek_modes_and_apis_deliver_the_exact_frames(w1, settings):
    _need_torchcodec()
    job = _job(w1, "random", 24)
    geometry = dataclasses.replace(job.workload.geometry, size=None)  # native size: exact
    exact, other = _TorchcodecReader(geometry), _TorchcodecReader(geometry)
    other.settings = settings
    bp = job.plan.batches[0]
    rec = job.index[int(bp.video_indices[0])]
    frames = bp.frame_indices[bp.video_indices == bp.video_indices[0], 0]
    frames = sorted(set(frames.tolist()) | {0, rec.num_frames - 1})  # both ends of the file
    a, b = exact.decode(rec, np.asarray(frames)), other.decode(rec, np.asarray(frames))
    assert a.shape == b.shape and _mean_diff(a, b) == 0.0
    shifted = exact.decode(rec, np.asarray(frames[1:] + [frames[0]]))
    assert _mean_diff(a, shifted) > 0  # and the check can fail
