"""``_surface_copy.copy_rows``: the pitched copy of a decoded picture into its stack row.

The CUDA runtime's ``cudaMemcpy2DAsync`` is replaced by a stand-in that performs the same
pitched copy with ``ctypes.memmove`` on host memory, so the pointers and sizes it is given
(row offsets, pitches, row width in bytes, rows) are checked on the CPU; a wrong pointer or
pitch copies other bytes. The NVDEC cuda tests check the real path frame by frame.
"""

from __future__ import annotations

import contextlib
import ctypes
import os

import pytest
import torch

from vidloader.decoding.nvdec import _surface_copy
from vidloader.decoding.nvdec._surface_copy import copy_rows, runtime_soname, stream_handle


class StandIn:
    """``cudaMemcpy2DAsync`` on host memory; ``rc`` is what it returns (0: it copies)."""

    def __init__(self, rc: int = 0):
        self.rc, self.calls, self.cleared = rc, [], 0

    def __call__(self, dst, dpitch, src, spitch, width, height, kind, stream):
        self.calls.append((dpitch, spitch, width, height, kind, stream))
        if self.rc == 0:
            for r in range(height):
                ctypes.memmove(dst + r * dpitch, src + r * spitch, width)
        return self.rc

    def clear_error(self):
        self.cleared += 1
        return 0


@pytest.fixture
def standin(monkeypatch):
    fn = StandIn()
    monkeypatch.setattr(_surface_copy, "_memcpy2d", fn)
    monkeypatch.setattr(_surface_copy, "_looked", True)
    monkeypatch.setattr(_surface_copy, "ENABLED", True)
    return fn


@pytest.mark.parametrize("dtype", [torch.uint8, torch.uint16])
def test_pitched_copy_into_a_stack_row_from_an_offset_view(standin, dtype):
    # a surface of pitch 64 inside a larger buffer (a non-zero storage offset), copied into
    # row 1 of a stack of 3: both pointers carry an offset, the pitch is not the width
    buffer = torch.arange(24 * 64, dtype=torch.int32).to(dtype).view(24, 64)
    surface = buffer[3:23, :48]  # 20 rows of 48 at pitch 64, starting 3 rows in
    stack = torch.zeros(3, 15, 40, dtype=dtype)
    copy_rows(stack[1], surface, 15, 40, stream=7)
    assert torch.equal(stack[1], surface[:15, :40])
    assert not stack[0].any() and not stack[2].any()  # nothing written beside its row
    size = surface.element_size()
    assert standin.calls == [(40 * size, 64 * size, 40 * size, 15, 3, 7)]


def test_a_failed_call_clears_the_error_and_falls_back_for_good(standin):
    standin.rc = 1  # cudaErrorInvalidValue
    surface = torch.arange(12 * 16, dtype=torch.uint8).view(12, 16)
    dst = torch.zeros(9, 10, dtype=torch.uint8)
    copy_rows(dst, surface, 9, 10, stream=5)
    assert torch.equal(dst, surface[:9, :10]) and standin.cleared == 1
    dst.zero_()
    copy_rows(dst, surface, 9, 10, stream=5)  # no second try
    assert torch.equal(dst, surface[:9, :10]) and len(standin.calls) == 1


def test_copy_without_a_stream_a_runtime_or_when_off(standin, monkeypatch):
    surface = torch.arange(12 * 16, dtype=torch.uint8).view(12, 16)
    want = surface[:9, :10]
    for setup in (lambda: None,  # not CUDA: no stream
                  lambda: monkeypatch.setattr(_surface_copy, "ENABLED", False)):
        setup()
        dst = torch.zeros(9, 10, dtype=torch.uint8)
        copy_rows(dst, surface, 9, 10, stream=None if not standin.calls else 5)
        assert torch.equal(dst, want)
    monkeypatch.setattr(_surface_copy, "ENABLED", True)
    monkeypatch.setattr(_surface_copy, "_memcpy2d", None)  # no runtime loaded
    dst = torch.zeros(9, 10, dtype=torch.uint8)
    copy_rows(dst, surface, 9, 10, stream=5)
    assert torch.equal(dst, want) and standin.calls == []


@pytest.mark.parametrize("bad", ["short_surface", "narrow_surface", "dtype", "shape", "strided"])
def test_a_raw_copy_only_where_it_stays_in_bounds(standin, bad):
    surface = torch.arange(12 * 16, dtype=torch.uint8).view(12, 16)
    dst = torch.zeros(9, 10, dtype=torch.uint8)
    rows, width = 9, 10
    if bad == "short_surface":
        surface = surface[:8]
    elif bad == "narrow_surface":
        surface = surface[:, :9]
    elif bad == "dtype":
        dst = dst.to(torch.int16)
    elif bad == "shape":
        rows = 8
    elif bad == "strided":
        surface = surface[:, ::2]
    with contextlib.suppress(RuntimeError):  # copy_ refuses what does not fit, as before
        copy_rows(dst, surface, rows, width, stream=3)
    assert standin.calls == []


def test_the_runtime_is_pytorchs_and_only_if_already_loaded(monkeypatch):
    assert runtime_soname("13.0") == "libcudart.so.13"
    assert runtime_soname("12.8") == "libcudart.so.12"
    assert runtime_soname("11.8") == "libcudart.so.11.0"
    assert runtime_soname(None) is None  # a CPU build of PyTorch
    opened = []

    def fake_cdll(name, mode=0):
        opened.append((name, mode))
        raise OSError("not loaded")

    monkeypatch.setattr(_surface_copy.ctypes, "CDLL", fake_cdll)
    assert _surface_copy._load("libcudart.so.13") is None
    assert opened == [("libcudart.so.13", getattr(os, "RTLD_NOLOAD", 0))]
    assert _surface_copy._load(None) is None


def test_no_stream_off_cuda():
    assert stream_handle(torch.device("cpu")) is None
