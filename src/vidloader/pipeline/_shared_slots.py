"""Staging slots in shared memory that a CPU worker writes without torch.

Every slot's outputs lie back to back in one anonymous shared file (``memfd_create`` on Linux,
an unlinked temporary file elsewhere on POSIX, a named mapping on Windows). The loader's
process sees them as torch tensors over its mapping (:meth:`SharedSlots.tensors`); a worker
receives the file's descriptor (``multiprocessing.reduction.DupFd``, the way torch shares its
own tensors) and sees numpy arrays over a mapping of its own (:meth:`SharedSlots.arrays`).

Why not torch's ``share_memory_``, as before: unpickling a torch tensor imports torch, and a
CPU decode worker only writes bytes. torch costs each worker ~190 MiB of RSS and, for the
program's first loader, its fork server ~2 s of start-up on the 2-core machine (issue 14 item 2,
issue 16 item 1). One file for all slots also gives each worker one descriptor instead of
one per slot (260 slots took 276 descriptors per worker).

Nothing is named in ``/dev/shm`` on POSIX, so nothing outlives the processes: the memory is
freed when the last mapping and descriptor are gone, however the processes end.
"""

from __future__ import annotations

import math
import mmap
import os
import sys
import tempfile
from multiprocessing import reduction

import numpy as np

_WINDOWS = sys.platform == "win32"


def _new_file(nbytes: int) -> int:
    """A descriptor of a new anonymous shared file of ``nbytes`` (zero-filled, lazily)."""
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("vidloader-staging", os.MFD_CLOEXEC)
    else:  # macOS and other POSIX: a temporary file, unlinked at once
        with tempfile.NamedTemporaryFile(prefix="vidloader-staging-", delete=False) as f:
            fd = os.dup(f.fileno())
        os.unlink(f.name)
    os.ftruncate(fd, nbytes)
    return fd


class SharedSlots:
    """``num_slots`` staging slots of ``shapes`` (``{output: shape}``, uint8) in one shared
    file.

    In the process that made it, :meth:`tensors` gives torch views; pickled to a worker, the
    copy it unpickles maps the same memory, and its :meth:`arrays` gives numpy views. Writes
    by either side are seen by the other (a shared mapping): the loader reads a slot after the
    worker's report of it.
    """

    def __init__(self, shapes: dict[str, tuple], num_slots: int, *, _attach=None) -> None:
        self.shapes = {name: tuple(int(d) for d in shape) for name, shape in shapes.items()}
        self.num_slots = int(num_slots)
        self.slot_bytes = sum(math.prod(s) for s in self.shapes.values())
        nbytes = max(1, self.slot_bytes * self.num_slots)  # mmap refuses a length of 0
        self._fd: int | None = None
        if _WINDOWS:  # pragma: no cover - no Windows machine here
            self._tag = _attach or f"vidloader-staging-{os.getpid()}-{id(self)}"
            self._map = mmap.mmap(-1, nbytes, tagname=self._tag)
        else:
            self._fd = _new_file(nbytes) if _attach is None else _attach
            self._map = mmap.mmap(self._fd, nbytes)
            if _attach is not None:  # a worker needs only the mapping
                os.close(self._fd)
                self._fd = None
        self._buffer = np.frombuffer(self._map, dtype=np.uint8)
        self._arrays: list[dict[str, np.ndarray]] | None = None

    def arrays(self) -> list[dict[str, np.ndarray]]:
        """Per slot, ``{output: uint8 array}`` over the shared memory."""
        if self._buffer is None:
            raise RuntimeError("these staging slots were closed (the loader shut down)")
        if self._arrays is None:
            slots, offset = [], 0
            for _ in range(self.num_slots):
                slot = {}
                for name, shape in self.shapes.items():
                    size = math.prod(shape)
                    slot[name] = self._buffer[offset:offset + size].reshape(shape)
                    offset += size
                slots.append(slot)
            self._arrays = slots
        return self._arrays

    def tensors(self) -> list[dict]:
        """Per slot, ``{output: uint8 torch tensor}`` over the shared memory (the numpy
        views, which the tensors keep alive, as they keep the mapping)."""
        import torch

        return [{name: torch.from_numpy(a) for name, a in slot.items()} for slot in self.arrays()]

    def close(self) -> None:
        """Give up this side's descriptor and views: the memory is unmapped once no view
        of it is left (the loader copies batches out of the slots, so none outlives it)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        self._arrays = self._buffer = self._map = None

    def __reduce__(self):
        if _WINDOWS:  # pragma: no cover
            return (_attach, (self.shapes, self.num_slots, self._tag))
        if self._fd is None:
            raise RuntimeError("these staging slots were closed (or are a worker's copy): "
                               "they cannot be sent to another process")
        return (_attach, (self.shapes, self.num_slots, reduction.DupFd(self._fd)))


def _attach(shapes: dict, num_slots: int, handle) -> SharedSlots:
    """Unpickle :class:`SharedSlots` in a worker: map the file the descriptor names."""
    if not _WINDOWS:
        handle = handle.detach()
    return SharedSlots(shapes, num_slots, _attach=handle)
