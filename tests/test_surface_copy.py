"""``_surface_copy.copy_rows``: the pitched copy of a decoded picture into its stack row.

The CUDA runtime's ``cudaMemcpy2DAsync`` is replaced by a stand-in that performs the same
pitched copy with ``ctypes.memmove`` on host memory, so the arguments it is given (pitches,
row width in bytes, rows) are checked on the CPU; on CPU tensors without a stream the copy
falls back to ``copy_``. The NVDEC cuda tests check the real path frame by frame.
"""

from __future__ import annotations

import ctypes

import pytest
import torch

from vidloader.decoding.nvdec import _surface_copy
from vidloader.decoding.nvdec._surface_copy import copy_rows, stream_handle


def _memcpy2d_standin(calls):
    def fn(dst, dpitch, src, spitch, width, height, kind, stream):
        calls.append((dpitch, spitch, width, height, kind, stream))
        for r in range(height):
            ctypes.memmove(dst + r * dpitch, src + r * spitch, width)
        return 0
    return fn


@pytest.mark.parametrize("dtype", [torch.uint8, torch.uint16])
def test_pitched_copy_takes_the_rows_and_columns_of_the_picture(monkeypatch, dtype):
    calls = []
    monkeypatch.setattr(_surface_copy, "_runtime", lambda: _memcpy2d_standin(calls))
    monkeypatch.setattr(_surface_copy, "ENABLED", True)
    surface = torch.arange(20 * 64, dtype=torch.int32).to(dtype).view(20, 64)  # pitch 64
    dst = torch.zeros(15, 40, dtype=dtype)
    copy_rows(dst, surface, 15, 40, stream=7)
    assert torch.equal(dst, surface[:15, :40])
    size = surface.element_size()
    assert calls == [(40 * size, 64 * size, 40 * size, 15, 3, 7)]


def test_falls_back_to_copy_without_a_stream_or_runtime_or_on_failure(monkeypatch):
    surface = torch.arange(12 * 16, dtype=torch.uint8).view(12, 16)
    want = surface[:9, :10]
    calls = []
    monkeypatch.setattr(_surface_copy, "_runtime", lambda: _memcpy2d_standin(calls))
    dst = torch.zeros(9, 10, dtype=torch.uint8)
    copy_rows(dst, surface, 9, 10, stream=None)  # not CUDA
    assert torch.equal(dst, want) and calls == []
    monkeypatch.setattr(_surface_copy, "_runtime", lambda: None)  # no CUDA runtime loaded
    dst.zero_()
    copy_rows(dst, surface, 9, 10, stream=5)
    assert torch.equal(dst, want)
    monkeypatch.setattr(_surface_copy, "_runtime", lambda: (lambda *a: 1))  # the call fails
    dst.zero_()
    copy_rows(dst, surface, 9, 10, stream=5)
    assert torch.equal(dst, want)


def test_off_when_disabled(monkeypatch):
    calls = []
    monkeypatch.setattr(_surface_copy, "_runtime", lambda: _memcpy2d_standin(calls))
    monkeypatch.setattr(_surface_copy, "ENABLED", False)
    surface = torch.ones(4, 8, dtype=torch.uint8)
    dst = torch.zeros(3, 5, dtype=torch.uint8)
    copy_rows(dst, surface, 3, 5, stream=1)
    assert calls == [] and bool((dst == 1).all())


def test_no_stream_off_cuda():
    assert stream_handle(torch.device("cpu")) is None
