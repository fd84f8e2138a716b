"""Packet payloads from separation mode's demux workers to the GPU process, through named
POSIX shared memory, with no torch on the worker's side.

A demux part's payloads go into one segment, written as the packets are demuxed
(:class:`SharedPayloads`); the message carries its name and the bundles without their bytes. The GPU process maps the segment and unlinks its
name at once (:func:`unpack_payloads`), so the name never outlives the message and nothing
is left in ``/dev/shm`` whatever happens next; the pages are returned when the last payload
view of the mapping is dropped (when the unit's decode finished: the packet cache keeps
copies, never views). A segment whose message was never read (the loader shut down first)
is unlinked by :func:`discard`; one whose worker was stopped or died between creating it and
sending it by the pool's shutdown (:func:`discard_prefixed`: each pool's segments share a name
prefix), or else by multiprocessing's resource tracker when the program exits, which the
worker registered it with (the tracker is the loader process's: fork-server children share
it).
"""

from __future__ import annotations

import contextlib
import dataclasses
import mmap
import os
import secrets
from multiprocessing import resource_tracker
from multiprocessing.shared_memory import SharedMemory

import numpy as np

_NO_PAYLOAD = np.empty(0, np.uint8)

try:  # POSIX shared memory: what SharedMemory uses on Linux and macOS
    import _posixshmem
except ImportError:  # pragma: no cover - Windows: a mapping lives while a handle is open
    _posixshmem = None


@dataclasses.dataclass(frozen=True)
class Segment:
    """A named shared-memory segment of ``size`` bytes (``name`` as ``SharedMemory.name``)."""

    name: str
    size: int


#: A new segment's size before it grows (doubling): shared memory takes pages as they are
#: written, so a size never written costs nothing but address space.
INITIAL_SEGMENT_BYTES = 64 << 20


class SharedPayloads:
    """Packet payloads written straight into one named shared-memory segment, which grows as
    they come: a demux part's packets are copied once, from FFmpeg's buffers to the segment
    (:func:`~vidloader.decoding.nvdec.demux_gops`'s ``sink``), instead of into bytes, then a
    bundle's array, then the segment. A worker held more than twice its part's bytes at its peak
    that way (2.3 times: the 2-core machine, W1 at half size, 34 MiB for 15 MiB of packets).

    The segment is a :class:`~vidloader.decoding.nvdec.PayloadSink`. Growing it maps the
    larger file again and keeps the earlier mappings (views of them stay valid: they map the
    same pages). :meth:`pack` ends it; :meth:`discard` drops it.

    Shared memory, not pickled bytes: the GPU process maps the segment instead of reading and
    unpickling the bytes on its main thread. Measured on the 2-core machine for 122 MB (one
    demux part of a GopShuffle block), as a torch shared tensor, which crosses the same way:
    1,204 ms of main-thread ``get`` as pickled numpy, 34 ms shared.
    """

    def __init__(self, capacity: int = INITIAL_SEGMENT_BYTES, *, prefix: str = "psm_") -> None:
        if _posixshmem is None:  # pragma: no cover - separation mode's workers are POSIX only
            raise OSError("SharedPayloads needs POSIX shared memory (Linux or macOS)")
        self.name = prefix + secrets.token_hex(6)  # macOS takes names of 31 bytes at most
        self._size = 0
        self._capacity = max(int(capacity), mmap.PAGESIZE)
        self._maps: list[tuple[mmap.mmap, int]] = []  # (mapping, its address), newest last
        flags = os.O_CREAT | os.O_EXCL | os.O_RDWR
        self._fd = _posixshmem.shm_open("/" + self.name, flags, mode=0o600)
        # A worker that dies before sending the segment: the loader's resource tracker (the
        # fork server's children share it) unlinks the name at exit, as for SharedMemory.
        resource_tracker.register("/" + self.name, "shared_memory")
        try:
            self._map(self._capacity)
        except BaseException:
            self.discard()
            raise

    def _map(self, capacity: int) -> None:
        os.ftruncate(self._fd, capacity)
        mapping = mmap.mmap(self._fd, capacity)
        address = np.frombuffer(mapping, np.uint8).ctypes.data  # the view is gone at once
        self._maps.append((mapping, address))
        self._capacity = capacity

    def tell(self) -> int:
        return self._size

    def write(self, data) -> None:
        view = memoryview(data).cast("B")
        end = self._size + view.nbytes
        if end > self._capacity:
            self._map(max(end, 2 * self._capacity))
        self._maps[-1][0][self._size:end] = view
        self._size = end

    def truncate(self, size: int) -> None:
        self._size = min(self._size, int(size))

    def view(self, start: int, stop: int) -> np.ndarray:
        return np.frombuffer(self._maps[-1][0], np.uint8, stop - start, start)

    def position(self, payload: np.ndarray) -> int | None:
        """Where ``payload`` starts in the segment, if it is a view of one of its mappings."""
        address = payload.ctypes.data
        for mapping, base in self._maps:
            if base <= address and address + payload.nbytes <= base + len(mapping):
                return address - base
        return None

    def pack(self, bundles: list) -> tuple[Segment | None, list]:
        """End the segment: ``(segment, light)``, the segment ``None`` when it holds no byte, and
        the bundles without their payloads, each with its ``(start, stop)`` in the segment
        (``None`` stays ``None``). Payloads that are not views of the segment are written to
        it first. Takes ``bundles``: the list is emptied, so that no view of the mappings is
        left when they close."""
        light = []
        try:
            for bundle in bundles:
                if bundle is None:
                    light.append(None)
                    continue
                start = self.position(bundle.payload) if bundle.payload.nbytes else self._size
                if start is None:
                    start = self._size
                    self.write(bundle.payload)
                light.append((dataclasses.replace(bundle, payload=_NO_PAYLOAD), start,
                              start + int(bundle.payload.nbytes)))
        except BaseException:
            self.discard()
            raise
        bundles.clear()
        if self._size == 0:
            self.discard()
            return None, light
        # Pages written past the end (a failed demux's, cut back by truncate) go back now; no
        # view reaches past the end.
        os.ftruncate(self._fd, self._size)
        self._close()
        return Segment(self.name, self._size), light

    def _close(self) -> None:
        for mapping, _ in self._maps:
            with contextlib.suppress(BufferError):  # a view still held: unmapped when it goes
                mapping.close()
        self._maps = []
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def discard(self) -> None:
        """Drop the segment (nobody else knows its name yet)."""
        self._close()
        discard(Segment(self.name, 0))


def unpack_payloads(light: list, segment: Segment | None) -> list:
    """The bundles of :meth:`SharedPayloads.pack`, their payloads views of the mapped segment, whose
    name is unlinked here: the memory goes back when the last view is dropped."""
    flat = _NO_PAYLOAD if segment is None else _map_and_unlink(segment)
    return [None if item is None else dataclasses.replace(item[0], payload=flat[item[1]:item[2]])
            for item in light]


def _map_and_unlink(segment: Segment) -> np.ndarray:
    if _posixshmem is None:  # pragma: no cover - Windows: copy, then close the last handle
        shm = SharedMemory(name=segment.name)
        try:
            return np.frombuffer(shm.buf, np.uint8, count=segment.size).copy()
        finally:
            shm.close()
    # By hand rather than SharedMemory(name=...): a SharedMemory cannot be closed (nor
    # garbage-collected quietly) while numpy views of its buffer live, and the payload views
    # outlive this call. numpy keeps the mmap alive, and the mmap unmaps when they are gone.
    try:
        fd = _posixshmem.shm_open("/" + segment.name, os.O_RDWR, mode=0o600)
        try:
            mapping = mmap.mmap(fd, segment.size)
        finally:
            os.close(fd)
    finally:  # mapped or not, the name goes now
        discard(segment)
    return np.frombuffer(mapping, np.uint8)


#: How the names of every pool's segments begin (:func:`segment_prefix`).
POOL_SEGMENT_PREFIX = "psm_vl"


def segment_prefix() -> str:
    """A name prefix for one pool's segments (:func:`discard_prefixed` removes them)."""
    return f"{POOL_SEGMENT_PREFIX}{secrets.token_hex(4)}_"


def _named_segments(prefix: str) -> list:
    """The entries of ``/dev/shm`` whose names begin with ``prefix`` (none where it cannot be
    listed)."""
    try:
        return [e for e in os.scandir("/dev/shm") if e.name.startswith(prefix)]
    except OSError:
        return []


def unread_segment_bytes() -> int:
    """Bytes held by the pools' segments that are still named in ``/dev/shm``: sent by a demux
    worker and not yet received (the loader unlinks a name as it maps it). No process maps
    them, so no process's PSS counts them; 0 where ``/dev/shm`` cannot be listed."""
    total = 0
    for entry in _named_segments(POOL_SEGMENT_PREFIX):
        try:
            total += entry.stat(follow_symlinks=False).st_blocks * 512  # pages written
        except OSError:  # received (unlinked) meanwhile
            continue
    return total


def discard_prefixed(prefix: str) -> int:
    """Unlink every segment whose name begins with ``prefix`` (a worker stopped while it
    wrote a part leaves its segment; the resource tracker would remove it only when the
    program exits). Returns how many; 0 where ``/dev/shm`` cannot be listed."""
    entries = _named_segments(prefix)
    for entry in entries:
        discard(Segment(entry.name, 0))
    return len(entries)


def discard(segment: Segment | None) -> None:
    """Unlink ``segment``'s name (a no-op if it is gone) and tell the resource tracker, which
    would otherwise unlink it again at exit and warn of a leak. Mappings stay valid."""
    if segment is None or _posixshmem is None:
        return
    path = "/" + segment.name
    with contextlib.suppress(FileNotFoundError):
        _posixshmem.shm_unlink(path)
    resource_tracker.unregister(path, "shared_memory")
