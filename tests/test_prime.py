"""NVDEC primed once per process and GPU, in the background (``pipeline/_prime.py``)."""

from __future__ import annotations

import contextlib
from types import SimpleNamespace

import pytest
import torch

from vidloader.decoding import _registry
from vidloader.pipeline import _prime


class _Recorder:
    """Stands in for the NVDEC executor: records what it was asked to decode."""

    calls: list = []

    def __init__(self, **options):
        self.options = options

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def decode(self, task, sink):
        _Recorder.calls.append((self.options, task.record.path, list(task.frames)))
        if task.record.path == "broken.mp4":
            raise RuntimeError("driver error")


@pytest.fixture
def fake_nvdec(monkeypatch):
    monkeypatch.setattr(_prime, "_PRIMED", set())
    monkeypatch.setitem(_registry._BACKENDS, "nvdec", lambda: _Recorder)
    monkeypatch.setattr(torch.cuda, "device", lambda gpu: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "synchronize", lambda gpu=None: None)
    monkeypatch.delenv("VIDLOADER_NVDEC_PRIME", raising=False)
    _Recorder.calls = []


def _index(*paths):
    return [SimpleNamespace(path=p) for p in paths]


def test_the_first_video_nvdec_takes_is_primed_once_per_gpu(fake_nvdec, monkeypatch):
    monkeypatch.setattr(_prime, "_task", lambda record: SimpleNamespace(record=record, frames=[0]))
    index = _index("refused.mp4", "a.mp4", "b.mp4")
    thread = _prime.prime_nvdec(index, {0: "10-bit H.264"}, gpu=1)
    thread.join(5)
    assert _Recorder.calls == [({"device": 1, "num_decoders": 1}, "a.mp4", [0])]
    assert _prime.prime_nvdec(index, {}, gpu=1) is None  # once per GPU and process
    _prime.prime_nvdec(index, {}, gpu=0).join(5)  # another GPU: primed too
    assert [c[0]["device"] for c in _Recorder.calls] == [1, 0]


def test_a_prime_that_fails_or_is_turned_off_costs_nothing(fake_nvdec, monkeypatch, caplog):
    monkeypatch.setattr(_prime, "_task", lambda record: SimpleNamespace(record=record, frames=[0]))
    with caplog.at_level("DEBUG", logger="vidloader.pipeline._prime"):
        _prime.prime_nvdec(_index("broken.mp4"), {}, gpu=0).join(5)
    assert "driver error" in caplog.text  # logged, not raised
    assert _prime.prime_nvdec(_index("a.mp4"), {0: "refused"}, gpu=3) is None  # nothing for NVDEC
    monkeypatch.setenv("VIDLOADER_NVDEC_PRIME", "0")
    assert _prime.prime_nvdec(_index("a.mp4"), {}, gpu=2) is None
    assert [c[1] for c in _Recorder.calls] == ["broken.mp4"]
