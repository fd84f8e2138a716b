"""Files read by reader processes into shared memory, a batch at a time, for the in-process GPU
image pool (:class:`~._image_decode.BatchDecodePool`, ``READER_PROCESSES``).

Why: session 25 measured nvImageCodec's decode of bytes already in memory at 1.5-2.1× its
decode of paths (one thread, H100, ``benchmarks/results/gpu/session25-4``), but reading the
files in the pool's own threads was slower than paths: each read takes the GIL that the
augmentation's launches need. Reader processes read with GILs of their own, into slabs of one
shared file (:class:`~._shared_slots.SharedSlots`, no ``/dev/shm`` size limit on Linux); a
decode lane hands nvImageCodec numpy views of a slab, and gives the slab back once the decode
has returned.

Per batch: the pool takes a free slab (waiting for a lane to give one back, which bounds the
batches read ahead), shares the paths out among the readers (:data:`SPLIT_READS`; each part
gets a share of the slab in proportion to its count) and gets a future. Each reader writes
its files one after another into its share and replies with each file's offset and length;
a file that does not fit in what is left of the share, or cannot be read, is marked, and the
lane passes its path instead (nvImageCodec opens it, or reports it). The future completes
when every part has come back. A thread of this
process receives the replies and completes the futures; a reader that dies fails every
pending future with its :class:`~..errors.WorkerError`.

This module imports no torch: the readers run in the ``"decode"`` fork server.
"""

from __future__ import annotations

import dataclasses
import os
import queue
import signal
import threading
import time
from concurrent.futures import Future

import numpy as np

from ..errors import WorkerError
from ..images._jpeg_header import UNKNOWN_FACTS, header_facts
from ._messages import STOP, Ready
from ._shared_slots import SharedSlots

#: A file that could not be read; a file that did not fit in its slab.
UNREADABLE, TOO_LARGE = -1, -2

#: Seconds the reply thread waits for a message before it checks whether it should stop.
REPLY_POLL_SECONDS = 0.2

#: Seconds between looks at a fence without ``synchronize()`` (:meth:`FileReaders.release`).
FENCE_POLL_SECONDS = 0.0005

#: Put in the free queue by a fenced :meth:`FileReaders.release`: wakes a read waiting for a
#: slab, which then looks at the fences.
_FENCED = object()


@dataclasses.dataclass(frozen=True)
class ReaderStart:
    worker_id: int


#: Each batch's files are shared out among all the reader processes, each reading its part
#: into its own share of the slab, so a batch is read in about 1/readers of the time: the
#: lanes waited ~8 ms a batch of 256 for their reads in session 30's timeline (H200,
#: ``session30-9``). Shared out against one reader a batch, alternated, 3 lanes, 300 batches:
#: 23,399 / 23,470 images/s against 18,704 / 20,654 (H200, ``session30-11``; two rounds on a
#: noisy machine). Off: one reader reads the whole batch.
SPLIT_READS = True

#: Each part's share of a slab starts on a multiple of this many bytes.
PART_ALIGN = 64


@dataclasses.dataclass(frozen=True)
class ReadTask:
    """Read ``paths`` into slab ``slab``, one after another from byte ``start`` up to ``stop``
    (``None``: the slab's end); with ``headers``, also walk each file's JPEG header
    (:func:`~..images._jpeg_header.header_facts`). ``part``: which part of its batch this is
    (:data:`SPLIT_READS`)."""

    slab: int
    paths: list
    headers: bool = False
    part: int = 0
    start: int = 0
    stop: int | None = None


@dataclasses.dataclass(frozen=True)
class FilesRead:
    """Slab ``slab`` holds the files of a :class:`ReadTask`: per file its offset and length in
    bytes, or :data:`UNREADABLE` / :data:`TOO_LARGE` as its length."""

    slab: int
    offsets: np.ndarray
    lengths: np.ndarray
    #: int64 ``[n, 4]``: each file's :func:`~..images._jpeg_header.header_facts` where the
    #: task asked for them (``UNKNOWN_FACTS`` for a file not read), else ``None``.
    facts: np.ndarray | None = None
    #: The task's ``part`` (offsets are from the slab's start whatever the part).
    part: int = 0


def file_reader_main(start: ReaderStart, task_q, result_q, slabs: SharedSlots) -> None:
    """A reader process: takes :class:`ReadTask` s, replies :class:`FilesRead`."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the loader's to handle
    views = [slot["bytes"] for slot in slabs.arrays()]
    result_q.put(Ready(start.worker_id))
    while (task := task_q.get()) is not STOP:
        result_q.put(read_into(views[task.slab], task))


def read_into(slab: np.ndarray, task: ReadTask) -> FilesRead:
    """Each file of ``task`` read into ``slab`` after the one before it (and its header's
    facts, where asked: here they cost this process's GIL, not the decode lanes')."""
    offsets = np.zeros(len(task.paths), np.int64)
    lengths = np.zeros(len(task.paths), np.int64)
    _read_files(slab[task.start:task.stop], task.paths, offsets, lengths)
    offsets += task.start
    if not task.headers:
        return FilesRead(task.slab, offsets, lengths, part=task.part)
    facts = np.full((len(task.paths), 4), UNKNOWN_FACTS, np.int64)
    for k in np.flatnonzero(lengths >= 0).tolist():  # the files read whole
        facts[k] = header_facts(slab[offsets[k]:offsets[k] + lengths[k]])
    return FilesRead(task.slab, offsets, lengths, facts, part=task.part)


def split_task(slab: int, paths: list, headers: bool, parts: int, slab_bytes: int) -> list[ReadTask]:
    """``paths`` as ``parts`` tasks (fewer where there are fewer paths): consecutive runs of
    paths of near-equal counts, each given a share of the slab in proportion to its count."""
    parts = max(1, min(parts, len(paths)))
    cuts = [len(paths) * k // parts for k in range(parts + 1)]
    edges = [slab_bytes * c // max(1, len(paths)) // PART_ALIGN * PART_ALIGN for c in cuts]
    edges[-1] = slab_bytes
    return [ReadTask(slab, list(paths[cuts[k]:cuts[k + 1]]), headers, k, edges[k], edges[k + 1])
            for k in range(parts)]


def merge_parts(parts: list[FilesRead]) -> FilesRead:
    """One :class:`FilesRead` of a batch's parts (in any order)."""
    parts = sorted(parts, key=lambda r: r.part)
    if len(parts) == 1:  # one task a batch: its part is 0 already
        return parts[0]
    facts = None if parts[0].facts is None else np.concatenate([r.facts for r in parts])
    return FilesRead(parts[0].slab, np.concatenate([r.offsets for r in parts]),
                     np.concatenate([r.lengths for r in parts]), facts)


def _read_files(slab: np.ndarray, paths: list, offsets: np.ndarray, lengths: np.ndarray) -> None:
    """Each file read into ``slab`` after the one before it; its offset and length (or
    :data:`UNREADABLE` / :data:`TOO_LARGE`) set."""
    memory, at = memoryview(slab), 0
    for k, path in enumerate(paths):
        offsets[k] = at
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            lengths[k] = UNREADABLE
            continue
        try:
            size = os.fstat(fd).st_size
            if at + size > len(slab):
                lengths[k] = TOO_LARGE
                continue
            got = os.readv(fd, [memory[at:at + size]])
            lengths[k] = got if got == size else UNREADABLE  # changed while read: by path
            at += got
        except OSError:
            lengths[k] = UNREADABLE
        finally:
            os.close(fd)


def slab_bytes(dataset, batch_size: int, sample: int = 256) -> int:
    """Bytes of a slab for ``dataset``: a batch of files of its mean size (from up to
    ``sample`` of them, spread over the dataset), with half again of room; at least 8 MiB. A
    file that does not fit goes by its path."""
    picks = np.linspace(0, len(dataset) - 1, num=min(sample, len(dataset))).astype(int)
    sizes = []
    for i in picks.tolist():
        try:
            sizes.append(os.stat(dataset.path(i)).st_size)
        except OSError:
            continue
    mean = float(np.mean(sizes)) if sizes else 0.0
    return max(8 << 20, int(1.5 * mean * batch_size))


class FileReaders:
    """``num_readers`` reader processes and ``num_slabs`` slabs of ``slab_bytes`` (module
    docstring). :meth:`read` a batch's paths, then :meth:`files` of the result, then
    :meth:`release` its slab; :meth:`close` at the end."""

    def __init__(self, num_readers: int, num_slabs: int, slab_bytes: int) -> None:
        from ._pool import WorkerProcesses  # imports torch: not at module level (the readers')

        self.slabs = SharedSlots({"bytes": (int(slab_bytes),)}, num_slabs)
        self.views = [slot["bytes"] for slot in self.slabs.arrays()]
        #: The slabs' count and size, for the loader's memory plan.
        self.num_slabs, self.bytes_per_slab = num_slabs, int(slab_bytes)
        self._free: queue.Queue = queue.Queue()
        for slab in range(num_slabs):
            self._free.put(slab)
        self._pending: dict[int, tuple[Future, int, list]] = {}  # slab: (future, parts, got)
        self._fenced: list = []  # (fence, slab): given back, free once the fence has passed
        self._failed: BaseException | None = None  # set once no read can complete
        self._lock = threading.Lock()
        self._turn = 0
        self._closing = threading.Event()
        self._procs = WorkerProcesses(file_reader_main, [ReaderStart(i) for i in range(num_readers)],
                                      num_readers, server="decode", inherited=self.slabs)
        self._replies = threading.Thread(target=self._receive, name="vidloader-read-replies",
                                         daemon=True)
        self._replies.start()

    def read(self, paths: list[str], *, headers: bool = False) -> Future:
        """A future of the :class:`FilesRead` of ``paths`` (with each file's header facts,
        where ``headers``); waits first for a free slab (a failed one at once where the
        readers are gone)."""
        future: Future = Future()
        while True:
            with self._lock:
                failed = self._failed
            if failed is not None:
                future.set_exception(failed)
                return future
            self._reclaim()
            if self._free.empty():  # none free but some behind a fence: wait for the oldest
                self._wait_oldest_fence()  # (at once where none is fenced)
                self._reclaim()
            try:
                slab = self._free.get(timeout=REPLY_POLL_SECONDS)
            except queue.Empty:
                continue
            if slab is not _FENCED:  # a token only wakes a read: it looks again
                break
        readers = self._procs.num_workers
        tasks = split_task(slab, paths, headers, readers if SPLIT_READS else 1, self.bytes_per_slab)
        with self._lock:
            failed = self._failed
            if failed is None:
                self._pending[slab] = (future, len(tasks), [])
        if failed is not None:
            self._free.put(slab)
            future.set_exception(failed)
            return future
        for task in tasks:
            self._procs.put(self._turn % readers, task)
            self._turn += 1
        return future

    def files(self, read: FilesRead, paths: list[str]) -> list:
        """Per file a uint8 view of its bytes in the slab, or its path where it was not read
        there (the decoder then opens it)."""
        view = self.views[read.slab]
        return [view[o:o + n] if n >= 0 else path
                for path, o, n in zip(paths, read.offsets.tolist(), read.lengths.tolist(), strict=True)]

    def release(self, slab: int, *, after=None) -> None:
        """Slab ``slab`` may be read into again: now (its decode has returned), or once
        ``after`` has passed (anything with ``query() -> bool``, a CUDA event: where the slabs
        are page-locked, the GPU may still be copying from them when the decode returns)."""
        if after is None:
            self._free.put(slab)
            return
        with self._lock:
            self._fenced.append((after, slab))
        self._free.put(_FENCED)  # a read waiting for a slab looks at the fences again

    def _wait_oldest_fence(self) -> None:
        """Until the oldest fence has passed (its ``synchronize()``, which lets go of the GIL,
        or polling its ``query()``)."""
        with self._lock:
            oldest = self._fenced[0][0] if self._fenced else None
        if oldest is None:
            return
        synchronize = getattr(oldest, "synchronize", None)
        if callable(synchronize):
            synchronize()
            return
        while not oldest.query() and not self._closing.is_set():
            time.sleep(FENCE_POLL_SECONDS)

    def _reclaim(self) -> None:
        """The fenced slabs whose fence has passed, free again."""
        with self._lock:
            passed = [slab for fence, slab in self._fenced if fence.query()]
            self._fenced = [(fence, slab) for fence, slab in self._fenced if slab not in passed]
        for slab in passed:
            self._free.put(slab)

    def _receive(self) -> None:
        try:
            while not self._closing.is_set():
                msg = self._procs.poll(REPLY_POLL_SECONDS)
                if isinstance(msg, FilesRead):
                    with self._lock:
                        future, parts, got = self._pending[msg.slab]
                        got.append(msg)
                        done = len(got) == parts
                        if done:
                            del self._pending[msg.slab]
                    if done:
                        self._complete(future, msg.slab, got)
        except WorkerError as exc:  # a reader died: no pending read will complete
            self._fail(WorkerError(f"a file reader process of the GPU image pool stopped "
                                   f"({exc}); set vidloader.pipeline._image_decode.READER_PROCESSES = 0 "
                                   "to have the decoder open the files instead"))
        except BaseException as exc:  # anything else here would leave the reads waiting
            self._fail(WorkerError(f"the file readers' reply thread failed: {exc!r}"))

    def _complete(self, future: Future, slab: int, parts: list) -> None:
        """``future``'s result: its batch's parts merged; or, should the merge fail, the
        error (the lane waiting on it must not hang) and the slab free again."""
        try:
            merged = merge_parts(parts)
        except Exception as exc:  # noqa: BLE001 - handed to the lane that waits on it
            future.set_exception(WorkerError(f"the file readers' replies for one batch could "
                                             f"not be put together: {exc!r}"))
            self._free.put(slab)
            return
        future.set_result(merged)

    def _fail(self, exc: BaseException) -> None:
        """No read completes from now on: the pending ones fail, their slabs are free again
        (no task goes to a reader once this is set)."""
        with self._lock:
            if self._failed is None:
                self._failed = exc
            pending, self._pending = self._pending, {}
        for slab, (future, _, _) in pending.items():
            future.set_exception(exc)
            self._free.put(slab)

    def close(self) -> None:
        """Stop the readers and the reply thread; pending reads fail. Idempotent."""
        if self._closing.is_set():
            return
        self._closing.set()
        try:
            self._replies.join()
            self._procs.shutdown()
        finally:
            self._fail(WorkerError("the file readers were shut down"))
            self.views = []
            self.slabs.close()
