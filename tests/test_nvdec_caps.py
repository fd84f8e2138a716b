"""What NVDEC decodes (``decoding/nvdec/_caps.py``): the per-generation table, the driver query
through a fake PyNvVideoCodec, and :func:`nvdec_decodability`, the pure function a scheduler
routes files with. No GPU needed."""

from __future__ import annotations

import time
from fractions import Fraction

import numpy as np
import pytest

from vidloader.decoding.nvdec import nvdec_decodability, query_nvdec_caps, table_nvdec_caps
from vidloader.decoding.nvdec._caps import gpu_generation, needed_queries
from vidloader.index import VideoRecord

from . import _fake_nvc


def _record(codec, pix_fmt="yuv420p", width=1920, height=1080, profile="", bit_depth=8, path="/v.mp4"):
    return VideoRecord(path=path, codec=codec, width=width, height=height, pix_fmt=pix_fmt,
                       bit_depth=bit_depth, rotation=0, fps=30.0, time_base=Fraction(1, 30),
                       num_frames=1, keyframes=np.zeros(1, np.int64), pts=np.zeros(1, np.int64),
                       profile=profile)


#: (record, decodable on Hopper per NVIDIA's table, the reason it is not)
HOPPER_CASES = [
    (_record("h264", profile="High"), None),
    (_record("h264", width=3840, height=2160, profile="High"), None),
    (_record("h264", "yuv420p10le", profile="High 10", bit_depth=10),
     "H.264 High 10 (10-bit 4:2:0): NVDEC cannot decode H.264 above 8 bits"),
    (_record("h264", "yuv422p", profile="High 4:2:2"),
     "H.264 High 4:2:2 (8-bit 4:2:2): NVDEC on turing cannot decode H.264 8-bit 4:2:2"),
    (_record("h264", width=7680, height=4320, profile="High"),
     "H.264 High (8-bit 4:2:0) 7680×4320 is above NVDEC's maximum 4096×4096"),
    (_record("hevc", "yuv420p10le", profile="Main 10", bit_depth=10), None),
    (_record("hevc", "yuv420p12le", profile="Rext", bit_depth=12), None),
    (_record("hevc", width=128, height=128, profile="Main"),
     "HEVC Main (8-bit 4:2:0) 128×128 is below NVDEC's minimum 144×144"),
    (_record("hevc", "yuv444p", profile="Rext"),
     "HEVC Rext (8-bit 4:4:4): vidloader's NVDEC path converts 4:2:0 pictures only"),
    (_record("vp9", "yuv420p10le", profile="Profile 2", bit_depth=10), None),
    (_record("av1", profile="Main"), "AV1 Main (8-bit 4:2:0): NVDEC on turing does not decode AV1"),
    (_record("libdav1d", profile="Main"), "AV1 Main (8-bit 4:2:0): NVDEC on turing does not decode AV1"),
    (_record("mpeg4", profile="Simple Profile"),
     "MPEG-4 Part 2 Simple Profile (8-bit 4:2:0): vidloader's NVDEC path decodes H.264, HEVC, AV1 and VP9 only"),
]


def test_decodability_on_hopper_names_codec_and_profile():
    caps = table_nvdec_caps("turing")
    mask, reasons = nvdec_decodability([r for r, _ in HOPPER_CASES], caps)
    assert reasons == [why for _, why in HOPPER_CASES]
    assert mask.tolist() == [why is None for _, why in HOPPER_CASES]
    assert not any("lib" in why for why in reasons if why)  # never an FFmpeg decoder library


def test_decodability_per_generation():
    av1 = [_record("av1", profile="Main"), _record("av1", "yuv420p10le", profile="Main", bit_depth=10)]
    assert nvdec_decodability(av1, table_nvdec_caps("ampere"))[0].tolist() == [True, True]
    high10 = [_record("h264", "yuv420p10le", profile="High 10", bit_depth=10)]
    assert nvdec_decodability(high10, table_nvdec_caps("blackwell"))[0].tolist() == [True]
    assert gpu_generation("NVIDIA H200", (9, 0)) == "turing"  # Hopper's NVDEC: Turing's column
    assert gpu_generation("NVIDIA A100-SXM4-80GB", (8, 0)) == "turing"
    assert gpu_generation("NVIDIA L4", (8, 9)) == "ampere"
    assert gpu_generation("NVIDIA B200", (10, 0)) == "blackwell"
    with pytest.raises(ValueError, match="unknown GPU generation"):
        table_nvdec_caps("kepler")


def test_decodability_of_100k_records_is_cheap():
    kinds = [r for r, _ in HOPPER_CASES]
    records = [kinds[k % len(kinds)] for k in range(100_000)]
    t0 = time.perf_counter()
    mask, reasons = nvdec_decodability(records, table_nvdec_caps("turing"))
    elapsed = time.perf_counter() - t0
    # A guard against a per-record slow path, loose enough for a busy 2-core CI machine
    # (timing is the benchmarks' business).
    assert elapsed < 5.0, f"{elapsed:.2f} s for 100k records"
    ok = np.array([why is None for _, why in HOPPER_CASES])
    np.testing.assert_array_equal(mask, ok[np.arange(100_000) % len(kinds)])
    assert len(reasons) == 100_000 and reasons[-1] == HOPPER_CASES[(100_000 - 1) % len(kinds)][1]


def test_driver_caps_win_over_the_table(monkeypatch):
    """``query_nvdec_caps`` asks GetDecoderCaps per (codec, chroma, depth) and takes its
    answer (the fake H200 decodes AV1, which NVIDIA's table denies Hopper)."""
    nvc = _fake_nvc.FakeNvc()
    _fake_nvc.install(monkeypatch, nvc)
    records = [_record("av1", profile="Main"), _record("hevc", "yuv420p10le", profile="Main 10", bit_depth=10)]
    caps = query_nvdec_caps(nvc, queries=needed_queries(records))
    assert caps.source == "driver" and caps.gpu == "Fake H200" and caps.engines == 7
    assert sorted(nvc.caps_calls) == [(8, 1, 8), (8, 1, 10), (11, 1, 8)]
    assert nvdec_decodability(records, caps)[0].tolist() == [True, True]
    assert caps.get("hevc", "420", 10).min_width == 144
    assert any("AV1 8-bit 4:2:0: 128x128..8192x8192" in line for line in caps.describe())


def test_the_driver_is_asked_once_and_not_when_the_gpu_is_full(monkeypatch):
    """Answers are kept per process (every loader asked again at construction); with the GPU
    nearly full the binding is not asked at all (PyNvVideoCodec 2.2.4 crashed the process
    there on an H100) and GpuMemoryError says why."""
    import torch

    from vidloader import GpuMemoryError

    nvc = _fake_nvc.FakeNvc()
    _fake_nvc.install(monkeypatch, nvc)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda gpu=None: (8 << 30, 80 << 30))
    records = [_record("hevc", "yuv420p10le", profile="Main 10", bit_depth=10)]
    first = query_nvdec_caps(nvc, queries=needed_queries(records))
    asked = list(nvc.caps_calls)
    again = query_nvdec_caps(nvc, queries=needed_queries(records))
    assert asked and nvc.caps_calls == asked and first.entries == again.entries
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda gpu=None: (10 << 20, 80 << 30))
    assert query_nvdec_caps(nvc, queries=needed_queries(records)).source == "driver"  # kept
    with pytest.raises(GpuMemoryError, match="capability query"):
        query_nvdec_caps(nvc, queries=needed_queries([_record("av1", profile="Main")]))
    assert nvc.caps_calls == asked
