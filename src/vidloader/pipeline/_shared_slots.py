"""Staging slots in shared memory that a CPU worker writes without torch.

Every slot's outputs lie in one anonymous shared file (``memfd_create`` on Linux; elsewhere on
POSIX an unlinked file in ``/dev/shm`` or the temporary folder; a named mapping on Windows).
The loader's process sees them as torch tensors over its mapping (:meth:`SharedSlots.tensors`);
a worker receives the file's descriptor and sees numpy arrays over a mapping of its own
(:meth:`SharedSlots.arrays`). The descriptor travels with the fork request as a ``Process``
argument (``WorkerProcesses(inherited=...)``: the fork server hands it to the child), not
through a queue, where ``multiprocessing.reduction.DupFd`` would park a copy in this
process's ``resource_sharer`` until a worker fetched it, and keep it for good if none did (a
worker that failed to start).

Why not torch's ``share_memory_``, as before: unpickling a torch tensor imports torch, and a
CPU decode worker only writes bytes. torch costs each worker ~190 MiB of RSS and, for the
program's first loader, its fork server ~2 s of start-up on the 2-core machine (issue 14 item 2,
issue 16 item 1). One file for all slots also gives each worker one descriptor instead of
one per slot (260 slots took 276 descriptors per worker).

Nothing is named on POSIX, so nothing outlives the processes: the memory is freed when the last
mapping and descriptor are gone, however the processes end.
"""

from __future__ import annotations

import math
import mmap
import os
import sys
import tempfile
import weakref
from multiprocessing import reduction

import numpy as np

_WINDOWS = sys.platform == "win32"

#: Each slot starts on a page of its own: workers filling neighbouring slots never write to
#: the same page (or cache line).
SLOT_ALIGN = 4096


def _new_file(nbytes: int) -> int:
    """A descriptor of a new anonymous shared file of ``nbytes`` (zero-filled)."""
    try:
        fd = os.memfd_create("vidloader-staging", os.MFD_CLOEXEC)
    except (AttributeError, OSError):  # no memfd (macOS; an old kernel, a seccomp profile)
        fd = _unlinked_file(nbytes)
    else:
        os.ftruncate(fd, nbytes)  # pages are taken as they are written, like torch.zeros' were
    return fd


def _unlinked_file(nbytes: int) -> int:
    """A temporary file, unlinked at once: in ``/dev/shm`` (memory) where it exists, else
    in the temporary folder. Its blocks are reserved now where the OS can, so a full disk is
    an error here, not a SIGBUS in the worker that writes the first batch."""
    folder = "/dev/shm" if os.path.isdir("/dev/shm") else None
    with tempfile.NamedTemporaryFile(prefix="vidloader-staging-", dir=folder, delete=False) as f:
        fd = os.dup(f.fileno())
    os.unlink(f.name)
    try:
        if hasattr(os, "posix_fallocate"):
            os.posix_fallocate(fd, 0, nbytes)
        else:
            os.ftruncate(fd, nbytes)
    except BaseException:
        os.close(fd)
        raise
    return fd


class SharedSlots:
    """``num_slots`` staging slots of ``shapes`` (``{output: shape}``, uint8) in one shared
    file.

    In the process that made it, :meth:`tensors` gives torch views; pickled to a worker (as a
    ``Process`` argument, see the module docstring), the copy it unpickles maps the same
    memory, and its :meth:`arrays` gives numpy views. Writes by either side are seen by the
    other (a shared mapping): the loader reads a slot after the worker's report of it.
    """

    def __init__(self, shapes: dict[str, tuple], num_slots: int, *, _attach=None) -> None:
        self.shapes = {name: tuple(int(d) for d in shape) for name, shape in shapes.items()}
        self.num_slots = int(num_slots)
        self.slot_bytes = sum(math.prod(s) for s in self.shapes.values())
        self.slot_stride = -(-self.slot_bytes // SLOT_ALIGN) * SLOT_ALIGN
        nbytes = max(1, self.slot_stride * self.num_slots)  # mmap refuses a length of 0
        self._fd: int | None = None
        self._closer = None
        if _WINDOWS:  # pragma: no cover - no Windows machine here
            self._tag = _attach or f"vidloader-staging-{os.getpid()}-{id(self)}"
            self._map = mmap.mmap(-1, nbytes, tagname=self._tag)
        else:
            fd = _new_file(nbytes) if _attach is None else _attach
            try:
                self._map = mmap.mmap(fd, nbytes)
            except BaseException:
                os.close(fd)
                raise
            if _attach is None:
                self._fd = fd
                # Freed with this object even without close() (a pool whose start failed).
                self._closer = weakref.finalize(self, os.close, fd)
            else:
                os.close(fd)  # a worker needs only the mapping
        self._buffer = np.frombuffer(self._map, dtype=np.uint8)
        self._arrays: list[dict[str, np.ndarray]] | None = None

    def arrays(self) -> list[dict[str, np.ndarray]]:
        """Per slot, ``{output: uint8 array}`` over the shared memory."""
        buffer = self.buffer  # raises once closed
        if self._arrays is None:
            slots = []
            for k in range(self.num_slots):
                slot, offset = {}, k * self.slot_stride
                for name, shape in self.shapes.items():
                    size = math.prod(shape)
                    slot[name] = buffer[offset:offset + size].reshape(shape)
                    offset += size
                slots.append(slot)
            self._arrays = slots
        return self._arrays

    @property
    def buffer(self) -> np.ndarray:
        """The whole shared memory, every slot, as one uint8 array (to page-lock it for
        CUDA, say)."""
        if self._buffer is None:
            raise RuntimeError("these staging slots were closed (the loader shut down)")
        return self._buffer

    def tensors(self) -> list[dict]:
        """Per slot, ``{output: uint8 torch tensor}`` over the shared memory (the numpy
        views, which the tensors keep alive, as they keep the mapping)."""
        import torch

        return [{name: torch.from_numpy(a) for name, a in slot.items()} for slot in self.arrays()]

    def close(self) -> None:
        """Give up this side's descriptor and views: the memory is unmapped once no view
        of it is left (the loader copies batches out of the slots, so none outlives it)."""
        self._fd = None
        if self._closer is not None:
            self._closer()  # closes the descriptor, once
        self._arrays = self._buffer = self._map = None

    def __reduce__(self):
        if _WINDOWS:  # pragma: no cover
            return (_attach, (self.shapes, self.num_slots, self._tag))
        fd = self._fd  # once: close() may run on another thread
        if fd is None:
            raise RuntimeError("these staging slots were closed (or are a worker's copy): "
                               "they cannot be sent to another process")
        return (_attach, (self.shapes, self.num_slots, reduction.DupFd(fd)))


def _attach(shapes: dict, num_slots: int, handle) -> SharedSlots:
    """Unpickle :class:`SharedSlots` in a worker: map the file the descriptor names."""
    if not _WINDOWS:
        handle = handle.detach()
    return SharedSlots(shapes, num_slots, _attach=handle)
