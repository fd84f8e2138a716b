"""A bounded pool of decoder threads that keeps a GPU's NVDEC engines busy.

PyNvVideoCodec releases the GIL while it parses and decodes, so several threads, each with
its own :class:`DecoderSlot` (decoders on their own CUDA stream) and its own demuxer cache,
decode different GOPs at once. Each thread clones the frames it keeps before its next decode
call (surfaces are recycled) and records a CUDA event; the consumer waits on that event.

The threads, and the CUDA stream each owns, live as long as the process: a pool borrows idle
ones and hands them back at :meth:`DecoderPool.close` (its decoders are closed then; the
thread and its stream stay). Why: the colour conversion multiplies matrices, and cuBLAS keeps
a workspace (32 MiB on Hopper) per (thread's handle, stream) pair for the life of the
process. With new threads and streams for every loader, 49 loaders of 4 decoder threads left
``torch.cuda.memory_allocated`` 2.7 GB higher on an H100, 128 MiB per loader
(``benchmarks/results/gpu/session8-8/leak.log``); with threads reused, it stays put.
"""

from __future__ import annotations

import queue
import threading
import weakref
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from ...constants import MAX_DECODERS_PER_GPU
from ...errors import ConfigError
from ._annexb import ContainerCache
from ._decoder import DecoderSlot

#: Tells a thread to stop serving its pool.
_STOP = object()
#: Thread names: serving a pool, and idle (kept for the next pool).
_SERVING_NAME, _IDLE_NAME = "vidloader-nvdec", "vidloader-idle-decoder"


class DecoderPool:
    """``num_decoders`` threads, each owning a decoder slot and a container cache.

    Args:
        make_slot: builds a :class:`DecoderSlot` on the thread's stream (called once in
            each thread, with ``stream=``).
        num_decoders: threads, ``1 ..`` :data:`MAX_DECODERS_PER_GPU`.
        device: the CUDA device whose threads are borrowed.

    A pool dropped without :meth:`close` still lets its threads go (a finalizer stops them),
    since they hold only a weak reference to it.
    """

    def __init__(self, make_slot: Callable[..., DecoderSlot], num_decoders: int, *, device: int = 0) -> None:
        if not 1 <= int(num_decoders) <= MAX_DECODERS_PER_GPU:
            raise ConfigError(f"num_decoders must be in 1..{MAX_DECODERS_PER_GPU}, got {num_decoders}")
        self.num_decoders = int(num_decoders)
        self._make_slot = make_slot
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._slots: list[tuple[DecoderSlot, ContainerCache]] = []
        self._lock = threading.Lock()
        self._left = threading.Semaphore(0)  # one release per thread handed back
        self._closed = False
        self._threads = _borrow(int(device), self.num_decoders)
        self._stop = weakref.finalize(self, _stop_serving, self._jobs, len(self._threads))
        me = weakref.ref(self)
        for t in self._threads:
            t.serve(self._jobs, self._left, me)

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future:
        """Run ``fn(slot, containers, *args)`` on a pool thread."""
        if self._closed:
            raise RuntimeError("DecoderPool.submit after close")
        fut: Future = Future()
        self._jobs.put((fut, fn, args))
        return fut

    @property
    def slots(self) -> list[DecoderSlot]:
        return [s for s, _ in self._slots]

    def close(self) -> None:
        """Cancel the jobs not started, wait for the running ones, close the decoders and
        hand the threads back. Idempotent."""
        if self._closed:
            return
        self._closed = True
        while True:
            try:
                item = self._jobs.get_nowait()
            except queue.Empty:
                break
            item[0].cancel()
        self._stop()  # one stop per thread, once
        for _ in self._threads:
            self._left.acquire()
        for slot, containers in self._slots:
            slot.close()
            containers.close()
        self._slots.clear()
        self._threads = []

    def _resources(self, stream) -> tuple[DecoderSlot, ContainerCache]:
        """A thread's slot and container cache (called on the thread, once)."""
        res = (self._make_slot(stream=stream), ContainerCache())
        with self._lock:
            self._slots.append(res)
        return res


def _stop_serving(jobs: queue.SimpleQueue, threads: int) -> None:
    for _ in range(threads):
        jobs.put(_STOP)


def _serve(jobs: queue.SimpleQueue, pool_ref, stream) -> None:
    """Run a pool's jobs until told to stop (on a borrowed thread)."""
    res = None
    while True:
        item = jobs.get()
        if item is _STOP:
            return
        fut, fn, args = item
        if fut.set_running_or_notify_cancel():
            try:
                if res is None:
                    pool = pool_ref()
                    if pool is None:
                        raise RuntimeError("the decoder pool was dropped while jobs were queued")
                    res = pool._resources(stream)
                    del pool
                fut.set_result(fn(*res, *args))
            except BaseException as exc:  # the future carries it to the caller
                fut.set_exception(exc)
                del exc
        # Not kept while waiting for the next job: a job's arguments reach staging slots,
        # and a failed one's future holds the frames of its traceback.
        del item, fut, fn, args


class _DecoderThread:
    """A daemon thread with its own CUDA stream, serving one pool at a time."""

    def __init__(self, device: int, key: tuple, make_stream: Callable[[], Any]) -> None:
        self.device, self.key = device, key
        self._make_stream = make_stream
        self._inbox: queue.SimpleQueue = queue.SimpleQueue()
        self.stream = None  # made on the thread, once
        self._thread = threading.Thread(target=self._run, name=_IDLE_NAME, daemon=True)
        self._thread.start()

    def serve(self, jobs: queue.SimpleQueue, left: threading.Semaphore, pool_ref) -> None:
        self._inbox.put((jobs, left, pool_ref))

    def _run(self) -> None:
        while True:
            jobs, left, pool_ref = self._inbox.get()
            self._thread.name = f"{_SERVING_NAME}-{self.device}"
            if self.stream is None:
                try:
                    self.stream = self._make_stream()
                except Exception:  # no stream here: each slot makes its own
                    self.stream = None
            try:
                _serve(jobs, pool_ref, self.stream)
            finally:
                # Idle (renamed, back in the list) before the pool learns it stopped: a thread
                # serving no pool must not pass for a live loader's, and the next pool may
                # borrow it at once.
                self._thread.name = _IDLE_NAME
                _give_back([self])
                left.release()
                del jobs, left, pool_ref


#: Idle threads by (device, the stream class of the time): tests put a stand-in for
#: ``torch.cuda.Stream`` in place, and a thread made under one must not serve the other.
_IDLE: dict[tuple[int, Any], list[_DecoderThread]] = {}
_IDLE_LOCK = threading.Lock()


def _stream_factory(device: int):
    import torch

    stream_class = torch.cuda.Stream

    def make():
        with torch.cuda.device(device):
            return stream_class(device)

    return stream_class, make


def _borrow(device: int, n: int) -> list[_DecoderThread]:
    stream_class, make = _stream_factory(device)
    with _IDLE_LOCK:
        idle = _IDLE.setdefault((device, stream_class), [])
        taken = [idle.pop() for _ in range(min(n, len(idle)))]
    return taken + [_DecoderThread(device, (device, stream_class), make) for _ in range(n - len(taken))]


def _give_back(threads: list[_DecoderThread]) -> None:
    with _IDLE_LOCK:
        for t in threads:
            _IDLE.setdefault(t.key, []).append(t)


_SHARED_STREAMS: dict[tuple[int, Any], Any] = {}


def shared_stream(device: int):
    """One stream per device for decoders on the caller's thread (``num_decoders=1``), kept
    for the process for the same reason as the threads (module docstring)."""
    stream_class, make = _stream_factory(device)
    with _IDLE_LOCK:
        stream = _SHARED_STREAMS.get((device, stream_class))
        if stream is None:
            stream = _SHARED_STREAMS[(device, stream_class)] = make()
    return stream
