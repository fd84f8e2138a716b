"""Host memory page-locked for CUDA (``pipeline/_page_lock.py``), with a stand-in for torch's
cudart: the calls run on a thread of their own (a failed one leaves its error pending on the
thread that made it), with the device current; a refusal warns and leaves the memory
pageable."""

from __future__ import annotations

import contextlib
import threading

import numpy as np
import pytest
import torch

from vidloader.pipeline import _page_lock


class StandInCudart:
    def __init__(self, register_error: int) -> None:
        self.register_error, self.calls = register_error, []

    def cudaHostRegister(self, pointer, size, flags):
        self.calls.append(("register", pointer, size, flags, threading.current_thread().name,
                           devices[-1] if devices else None))
        return self.register_error

    def cudaHostUnregister(self, pointer):
        self.calls.append(("unregister", pointer, threading.current_thread().name))
        return 0


devices: list = []


@pytest.fixture
def cudart(monkeypatch, request):
    stand_in = StandInCudart(request.param)

    @contextlib.contextmanager
    def device(d):
        devices.append(d)
        yield
    monkeypatch.setattr(torch.cuda, "cudart", lambda: stand_in)
    monkeypatch.setattr(torch.cuda, "device", device)
    return stand_in


@pytest.mark.parametrize("cudart", [0], indirect=True)
def test_locks_on_its_own_thread_with_the_device_current_and_unlocks(cudart):
    memory = np.zeros(10_000, np.uint8)
    unlock = _page_lock.pin_host_memory(memory, torch.device("cuda", 1), what="test")
    assert callable(unlock)
    kind, pointer, size, flags, thread, device = cudart.calls[0]
    assert (kind, pointer, size, flags) == ("register", memory.ctypes.data, 10_000, 0)
    assert thread == "vidloader-cudaHostRegister" != threading.current_thread().name
    assert device == torch.device("cuda", 1)
    unlock()
    assert cudart.calls[1] == ("unregister", memory.ctypes.data, "vidloader-cudaHostUnregister")


@pytest.mark.parametrize("cudart", [1], indirect=True)
def test_a_refusal_warns_names_the_setting_and_leaves_the_memory_pageable(cudart):
    with pytest.warns(RuntimeWarning, match=r"could not page-lock the readers' 64 bytes.*error 1"
                                            r".*Set SOME_SWITCH = False"):
        got = _page_lock.pin_host_memory(np.zeros(64, np.uint8), torch.device("cuda", 0),
                                         what="the readers'", off="SOME_SWITCH = False")
    assert got is None and [c[0] for c in cudart.calls] == ["register"]


@pytest.mark.parametrize("cudart", [0], indirect=True)
def test_a_device_without_index_is_the_caller_s_current_one(cudart, monkeypatch):
    """``device="cuda"``: the caller's current device (a DDP rank's ``set_device``), not the
    helper thread's, where it would be 0."""
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 3)
    _page_lock.pin_host_memory(np.zeros(8, np.uint8), torch.device("cuda"))
    assert cudart.calls[0][-1] == torch.device("cuda", 3)
