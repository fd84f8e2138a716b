"""Reader processes for the in-process GPU image pool (``pipeline/_image_readers.py``): files
read into slabs of shared memory, handed to the decode lanes as numpy views. On the CPU the
pool runs with a stand-in for nvImageCodec (``test_images._packing_stand_in``)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from vidloader import ImageLoader, SequentialFrames, WorkerError
from vidloader.images import ImageFolder, ImageProcess
from vidloader.pipeline._image_readers import (
    TOO_LARGE,
    UNREADABLE,
    FileReaders,
    ReadTask,
    read_into,
)

from .test_images import folder, install_packing_decoder  # noqa: F401 - the fixture


def test_read_into_places_files_one_after_another(tmp_path):
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    a.write_bytes(b"x" * 10)
    b.write_bytes(b"y" * 30)
    c.write_bytes(b"z" * 5)
    slab = np.zeros(20, np.uint8)
    got = read_into(slab, ReadTask(3, [str(a), str(tmp_path / "missing"), str(b), str(c)]))
    assert got.slab == 3
    assert got.lengths.tolist() == [10, UNREADABLE, TOO_LARGE, 5]
    assert got.offsets.tolist()[0] == 0 and got.offsets.tolist()[3] == 10
    assert bytes(slab[:15]) == b"x" * 10 + b"z" * 5


def test_read_into_walks_headers_where_asked(folder):  # noqa: F811
    """With ``headers``, each file read has its ``header_facts`` (0s for what is not a
    JPEG); a file not read has ``UNKNOWN_FACTS``; without, no facts."""
    from vidloader.images._jpeg_header import UNKNOWN_FACTS, header_facts

    paths = sorted(str(p) for p in Path(folder).rglob("*.*"))
    slab = np.zeros(1 << 20, np.uint8)
    assert read_into(slab, ReadTask(0, paths)).facts is None
    got = read_into(slab, ReadTask(0, paths + ["/nonexistent.jpg"], headers=True))
    expect = [header_facts(Path(p).read_bytes()) for p in paths] + [UNKNOWN_FACTS]
    assert got.facts.tolist() == [list(e) for e in expect]
    assert any(row[0] == 1 for row in expect) and any(row == (0, 0, 0, 0) for row in expect)
    first = Path(paths[0]).stat().st_size  # a slab with room for the first file only
    small = read_into(np.zeros(first + 1, np.uint8), ReadTask(0, paths[:3], headers=True))
    assert small.lengths.tolist()[1:] == [TOO_LARGE, TOO_LARGE]
    assert small.facts.tolist() == [list(expect[0]), list(UNKNOWN_FACTS), list(UNKNOWN_FACTS)]


def test_file_readers_read_release_and_close(tmp_path):
    files = []
    for k in range(12):
        path = tmp_path / f"f{k}"
        path.write_bytes(bytes([k]) * (100 + k))
        files.append(str(path))
    readers = FileReaders(2, 2, 1 << 12)
    try:
        for k, batch in enumerate((files[:6], files[6:], files[::2])):
            read = readers.read(batch, headers=k == 1).result(timeout=30)
            assert (read.facts is not None) == (k == 1)
            if read.facts is not None:  # not JPEGs
                assert read.facts.tolist() == [[0, 0, 0, 0]] * len(batch)
            views = readers.files(read, batch)
            assert [bytes(v) for v in views] == [Path(p).read_bytes() for p in batch]
            readers.release(read.slab)
        procs = list(readers._procs.procs)
        maps = [Path(f"/proc/{p.pid}/maps") for p in procs]
        if all(m.exists() for m in maps):  # Linux: the readers never load torch
            assert not any("libtorch" in m.read_text() for m in maps)
    finally:
        readers.close()
    assert not any(p.is_alive() for p in procs)
    with pytest.raises(WorkerError, match="shut down"):
        readers.read(files[:1]).result(timeout=5)


def test_split_task_shares_the_paths_and_the_slab_out():
    from vidloader.pipeline._image_readers import PART_ALIGN, split_task

    tasks = split_task(4, [f"p{k}" for k in range(7)], True, 2, 10_000)
    assert [t.paths for t in tasks] == [["p0", "p1", "p2"], ["p3", "p4", "p5", "p6"]]
    assert [(t.part, t.slab, t.headers) for t in tasks] == [(0, 4, True), (1, 4, True)]
    assert tasks[0].start == 0 and tasks[0].stop == tasks[1].start and tasks[1].stop == 10_000
    assert tasks[1].start % PART_ALIGN == 0 and abs(tasks[1].start - 10_000 * 3 / 7) < PART_ALIGN
    assert len(split_task(0, ["a"], False, 4, 100)) == 1  # no more parts than paths
    assert split_task(0, ["a", "b"], False, 1, 100)[0].stop == 100


@pytest.mark.parametrize("split", [False, True])
def test_reads_shared_out_among_readers_give_what_one_reader_gives(tmp_path, monkeypatch, split):
    """``SPLIT_READS``: a batch's files read by both readers, each into its share of the
    slab, merged in order (offsets, lengths, header facts); a file too large for its share
    is marked ``TOO_LARGE`` (the decoder opens it) and the others are read."""
    from vidloader.pipeline import _image_readers

    monkeypatch.setattr(_image_readers, "SPLIT_READS", split)
    files = []
    for k in range(9):
        path = tmp_path / f"f{k}"
        path.write_bytes(bytes([k]) * (200 + 50 * k + (1500 if k == 7 else 0)))
        files.append(str(path))
    readers = FileReaders(2, 1, 1 << 12)
    try:
        for batch in (files, files[:3], files[::-1]):
            read = readers.read(batch, headers=True).result(timeout=30)
            assert read.facts.shape == (len(batch), 4)
            views = readers.files(read, batch)
            for path, view, n in zip(batch, views, read.lengths.tolist(), strict=True):
                if n == TOO_LARGE:
                    assert view == path
                else:
                    assert bytes(view) == Path(path).read_bytes()
            too_large = read.lengths.tolist().count(TOO_LARGE)
            readers.release(read.slab)
            if batch == files:  # 4,096 bytes: f7 (2,050) does not fit after f0-f6 (2,450)
                assert too_large == 1  # nor in the second half's 2,304 after f4-f6
    finally:
        readers.close()


class _Fence:
    """A CUDA event's ``query`` as :meth:`FileReaders.release` uses it, passed by hand."""

    def __init__(self) -> None:
        self.passed = False

    def query(self) -> bool:
        return self.passed


def test_a_slab_given_back_behind_a_fence_is_read_into_only_once_it_has_passed(tmp_path):
    """Page-locked slabs (``_image_decode.PIN_READ_SLABS``) are given back behind the decode's
    event: the next read waits for a slab until the fence passes, and takes it then."""
    path = tmp_path / "f"
    path.write_bytes(b"q" * 100)
    readers = FileReaders(1, 1, 1 << 12)
    try:
        first = readers.read([str(path)]).result(timeout=30)
        fence = _Fence()
        readers.release(first.slab, after=fence)
        got = []
        waiting = threading.Thread(target=lambda: got.append(readers.read([str(path)])))
        waiting.start()
        time.sleep(0.3)
        assert not got and waiting.is_alive()  # no free slab: the fence has not passed
        fence.passed = True
        waiting.join(timeout=10)
        assert got and bytes(readers.files(got[0].result(timeout=30), [str(path)])[0]) == b"q" * 100
        assert readers._fenced == []
    finally:
        readers.close()


class _SyncFence(_Fence):
    """A fence with a CUDA event's ``synchronize``, which passes it."""

    def __init__(self) -> None:
        super().__init__()
        self.waited = 0

    def synchronize(self) -> None:
        time.sleep(0.05)
        self.waited += 1
        self.passed = True


def test_a_read_already_waiting_wakes_for_a_slab_given_back_behind_a_fence(tmp_path, monkeypatch):
    """A read waiting for a slab when none was fenced wakes when one is given back behind a
    fence (not at its next look at the free queue, 1.5 s here), waits on the fence
    (``synchronize`` where it has one) and takes the slab."""
    from vidloader.pipeline import _image_readers

    monkeypatch.setattr(_image_readers, "REPLY_POLL_SECONDS", 1.5)
    path = tmp_path / "f"
    path.write_bytes(b"q" * 100)
    readers = FileReaders(1, 1, 1 << 12)
    try:
        first = readers.read([str(path)]).result(timeout=30)
        got = []
        waiting = threading.Thread(target=lambda: got.append(readers.read([str(path)])))
        waiting.start()
        time.sleep(0.2)  # the read waits on the free queue now
        fence = _SyncFence()
        started = time.monotonic()
        readers.release(first.slab, after=fence)
        waiting.join(timeout=10)
        assert got and time.monotonic() - started < 1.0 and fence.waited == 1
        assert got[0].result(timeout=30).lengths.tolist() == [100]
    finally:
        readers.close()


def test_fences_passing_out_of_order_keep_no_slab_waiting(tmp_path, monkeypatch):
    """Slabs a then b given back behind fences, b's passing first (lanes on different
    streams): a read takes b; once a's fence passes, the next read takes a at once, not at
    its next look at the free queue (1.5 s here)."""
    from vidloader.pipeline import _image_readers

    monkeypatch.setattr(_image_readers, "REPLY_POLL_SECONDS", 1.5)
    path = tmp_path / "f"
    path.write_bytes(b"q" * 100)
    readers = FileReaders(1, 2, 1 << 12)
    try:
        a, b = (readers.read([str(path)]).result(timeout=30) for _ in range(2))
        fence_a, fence_b = _Fence(), _Fence()
        readers.release(a.slab, after=fence_a)
        readers.release(b.slab, after=fence_b)
        fence_b.passed = True
        assert readers.read([str(path)]).result(timeout=30).slab == b.slab
        threading.Timer(0.1, lambda: setattr(fence_a, "passed", True)).start()
        started = time.monotonic()
        assert readers.read([str(path)]).result(timeout=30).slab == a.slab
        assert time.monotonic() - started < 1.0
    finally:
        readers.close()


def test_a_batch_whose_parts_cannot_be_merged_fails_its_read_and_frees_its_slab(tmp_path, monkeypatch):
    from vidloader.pipeline import _image_readers

    def broken(parts):
        raise ValueError("parts out of shape")
    monkeypatch.setattr(_image_readers, "merge_parts", broken)
    path = tmp_path / "f"
    path.write_bytes(b"q" * 100)
    readers = FileReaders(1, 1, 1 << 12)
    try:
        with pytest.raises(WorkerError, match="could not be put together.*parts out of shape"):
            readers.read([str(path)]).result(timeout=30)
        assert readers._free.qsize() == 1
    finally:
        readers.close()


def test_page_locked_pool_gives_slabs_back_behind_the_lane_stream_s_event(folder, monkeypatch):  # noqa: F811
    """Where the slabs are page-locked (``_unpin`` set), each slab goes back behind an event
    recorded on the lane's own stream after its decode; pageable, at once."""
    from vidloader.pipeline import _image_decode

    monkeypatch.setattr(_image_decode, "READER_PROCESSES", 2)
    pillow, made, given = _packing_pools(folder, monkeypatch)
    next(iter(made))  # starts the pool (persistent)
    pool, released = made._pool, []
    for k, lane in enumerate(pool.lanes):  # (the augmentation waits on the same stand-ins)
        lane.streams.record = lambda stream=None, k=k: ("event on lane", k, stream)
    pool.augmenter.streams.wait = lambda event: None
    real = pool.file_readers.release
    pool.file_readers.release = lambda slab, after=None: (released.append(after), real(slab))
    list(made)
    assert released and all(after is None for after in released)
    released.clear()
    pool._unpin = lambda: None
    list(made)
    lanes = {(k, lane.streams.own) for k, lane in enumerate(pool.lanes)}
    assert released and all(after[0] == "event on lane" and after[1:] in lanes for after in released)
    pool._unpin = None
    made.shutdown()


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs a named pipe")
def test_a_reader_dying_mid_read_fails_the_read_and_frees_its_slab(tmp_path):
    """A reader killed while it reads (blocked on a named pipe nobody writes) fails the
    pending read (never a hang), its slab is free again, and later reads fail at once."""
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    readers = FileReaders(1, 2, 1 << 12)
    try:
        pending = readers.read([str(pipe)])
        time.sleep(0.5)  # the reader is inside os.open of the pipe now
        readers._procs.procs[0].kill()
        with pytest.raises(WorkerError, match="file reader process .*READER_PROCESSES = 0"):
            pending.result(timeout=30)
        assert readers._free.qsize() == 2
        with pytest.raises(WorkerError):
            readers.read([str(pipe)]).result(timeout=5)
    finally:
        readers.close()


def _packing_pools(folder, monkeypatch):  # noqa: F811
    """A Pillow loader and an in-process GPU pool loader (packing stand-in for nvImageCodec,
    persistent) over ``folder``, and the list the stand-in appends the type name of each
    source it is given to."""
    given = []
    Packing = install_packing_decoder(
        monkeypatch, lambda sources, sizes, options, out: given.extend(type(s).__name__ for s in sources))
    ds = ImageFolder(folder, num_workers=0, progress=False)
    proc = ImageProcess(size=(40, 40), crop="random_resized", random_flip=True)
    pillow = ImageLoader(ds, batch_size=4, processing=proc, num_workers=0, on_error="skip")
    made = ImageLoader(ds, batch_size=4, processing=proc, on_error="skip", decoder=Packing("cpu"),
                       persistent_workers=True)
    made._custom_decoder = None  # the pool makes its own decoders, as for "nvimgcodec"
    return pillow, made, given


@pytest.mark.parametrize("slab_bytes, split, take_any", [(None, False, False), (2000, False, False),
                                                       (None, True, True), (2000, True, False)])
def test_gpu_pool_with_reader_processes_gives_the_same_batches(folder, monkeypatch,  # noqa: F811
                                                               slab_bytes, split, take_any):
    """With ``READER_PROCESSES``, the in-process pool's lanes decode the files the readers
    read (numpy views of a slab); a slab too small for a file sends its path instead. The
    batches equal the Pillow path's, and the readers are gone after ``shutdown``; also with
    each batch's reads shared out among the readers (``SPLIT_READS``) and with any free
    lane taking the next batch (``LANES_TAKE_ANY``)."""
    from vidloader.pipeline import _image_decode, _image_readers

    monkeypatch.setattr(_image_decode, "READER_PROCESSES", 2)
    monkeypatch.setattr(_image_readers, "SPLIT_READS", split)
    monkeypatch.setattr(_image_decode, "LANES_TAKE_ANY", take_any)
    monkeypatch.setattr(_image_decode, "NVIMGCODEC_LANES", 3)  # more lanes than the default 2
    if slab_bytes is not None:
        monkeypatch.setattr(_image_readers, "slab_bytes", lambda dataset, batch: slab_bytes)
    pillow, made, given = _packing_pools(folder, monkeypatch)
    for _ in range(2):  # two epochs through the same slabs
        for x, y in zip(list(pillow), made, strict=True):
            assert torch.equal(x["images"], y["images"])
    assert (made._pool._any_lane is not None) == take_any and len(made._pool.lanes) == 3
    procs = list(made._pool.file_readers._procs.procs)
    assert made._pool.file_readers._free.qsize() == len(made._pool.file_readers.views)  # all back
    made.shutdown()
    assert "ndarray" in given
    if slab_bytes is not None:  # the 48x64 JPEGs are ~2 KB: some went by path
        assert "str" in given
    deadline = time.monotonic() + 10
    while any(p.is_alive() for p in procs) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(p.is_alive() for p in procs)
    assert not any(t.name == "vidloader-read-replies" for t in threading.enumerate())


def _pool_sources(folder, monkeypatch):  # noqa: F811
    """An in-process GPU pool (packing stand-in) run for one epoch next to the Pillow path:
    the batches must be equal. Returns the type names of what the lanes decoded and whether
    the pool had file readers."""
    pillow, made, given = _packing_pools(folder, monkeypatch)
    for x, y in zip(list(pillow), made, strict=True):
        assert torch.equal(x["images"], y["images"])
    had_readers = made._pool.file_readers is not None
    from vidloader.bench._images import _pool_settings

    settings = _pool_settings(made._pool)  # what the image bench records
    assert settings == {"pool": "BatchDecodePool", "reader_processes": 2 if had_readers else 0,
                        "packed_decode": True, "decoder": made._pool.decoder.name,
                        "reads_shared_out": had_readers,  # SPLIT_READS on by default
                        "slabs_page_locked": False,  # on the CPU
                        "lanes": 2, "any_free_lane": False}  # the defaults (session 31)
    made.shutdown()
    return set(given), had_readers


def test_gpu_pool_without_reader_processes_decodes_paths(folder, monkeypatch):  # noqa: F811
    """``READER_PROCESSES = 0``: no readers; the lanes give the decoder the paths."""
    from vidloader.pipeline import _image_decode

    monkeypatch.setattr(_image_decode, "READER_PROCESSES", 0)
    assert _pool_sources(folder, monkeypatch) == ({"str"}, False)


def test_gpu_pool_in_a_daemonic_process_starts_no_readers(folder, monkeypatch):  # noqa: F811
    """A daemonic process (a DataLoader's or a Pool's worker) may not have children: the pool
    starts no readers there and decodes paths, with the default ``READER_PROCESSES``."""
    from vidloader.pipeline import _image_decode

    assert _image_decode.READER_PROCESSES > 0
    monkeypatch.setattr(_image_decode, "_in_daemonic_process", lambda: True)
    assert _pool_sources(folder, monkeypatch) == ({"str"}, False)


def test_gpu_pool_warns_and_decodes_paths_when_readers_cannot_start(folder, monkeypatch):  # noqa: F811
    """Readers that cannot start (no shared memory, say): one warning naming the setting, and
    the lanes decode the paths."""
    from vidloader.pipeline import _image_readers

    def refuse(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(_image_readers, "FileReaders", refuse)
    with pytest.warns(RuntimeWarning, match="READER_PROCESSES = 0"):
        assert _pool_sources(folder, monkeypatch) == ({"str"}, False)


def test_gpu_pool_uses_reader_processes_by_default(folder, monkeypatch):  # noqa: F811
    """The default: readers, and the lanes decode views of their slabs."""
    sources, had_readers = _pool_sources(folder, monkeypatch)
    assert had_readers and "ndarray" in sources


@pytest.mark.parametrize("walk", [True, False])
def test_readers_give_header_facts_to_decoders_that_take_them(folder, monkeypatch, walk):  # noqa: F811
    """``READERS_WALK_HEADERS``: a lane decoder that ``takes_header_facts`` (nvJPEG's) is
    given each file's facts as the readers read them (a path's row unknown); off, or for
    other decoders, none are asked for. The batches are the same either way."""
    from vidloader.images import _nvimgcodec
    from vidloader.images._jpeg_header import UNKNOWN_FACTS, header_facts
    from vidloader.pipeline import _image_decode

    monkeypatch.setattr(_image_decode, "READER_PROCESSES", 2)
    monkeypatch.setattr(_image_decode, "READERS_WALK_HEADERS", walk)
    pillow, made, given = _packing_pools(folder, monkeypatch)
    seen = []
    packing = _nvimgcodec.NvImageCodecDecoder  # the stand-in class _packing_pools installed
    real = packing.decode_packed

    def taking(self, sources, sizes, *, header_facts=None, **options):
        seen.append((list(sources), header_facts))
        return real(self, sources, sizes, **options)
    monkeypatch.setattr(packing, "takes_header_facts", True, raising=False)
    monkeypatch.setattr(packing, "decode_packed", taking)
    for x, y in zip(list(pillow), made, strict=True):
        assert torch.equal(x["images"], y["images"])
    made.shutdown()
    assert seen
    for sources, facts in seen:
        if not walk:
            assert facts is None
            continue
        expect = [list(UNKNOWN_FACTS) if isinstance(s, str) else list(header_facts(s)) for s in sources]
        assert facts.tolist() == expect


@pytest.mark.cuda
def test_page_locked_slabs_give_the_batches_pageable_slabs_give(tmp_path, monkeypatch):
    """``PIN_READ_SLABS``: the in-process GPU pool's reader slabs page-locked for CUDA, each
    given back behind its decode's event. Over two epochs of 13 batches (the pool's 6 slabs
    reused: 3 slots + 2 lanes + 1), the batches equal those of pageable slabs, and the memory is unlocked at the
    end; also with each batch's reads shared out among the readers (``SPLIT_READS``) and any
    free lane taking the next batch (``LANES_TAKE_ANY``)."""
    pytest.importorskip("nvidia.nvimgcodec")
    from vidloader.images._synthetic import write_image_folder
    from vidloader.pipeline import _image_decode, _image_readers

    ds = ImageFolder(write_image_folder(tmp_path / "jpegs", num_classes=4, per_class=100),
                     progress=False)
    proc = ImageProcess(size=(64, 64), crop="center", center_fraction=0.875)

    def epochs(pin: bool, split: bool = False, take_any: bool = False):
        monkeypatch.setattr(_image_decode, "PIN_READ_SLABS", pin)
        monkeypatch.setattr(_image_readers, "SPLIT_READS", split)
        monkeypatch.setattr(_image_decode, "LANES_TAKE_ANY", take_any)
        loader = ImageLoader(ds, batch_size=32, sampler=SequentialFrames(), processing=proc,
                             decoder="nvimgcodec", device="cuda", num_workers=0,
                             persistent_workers=True)
        out, pinned = [], []
        for epoch in range(2):
            loader.set_epoch(epoch)
            for batch in loader:
                pinned.append(loader._pool.slabs_page_locked)
                out.append(batch["images"].cpu())
        pool = loader._pool
        assert (pool._any_lane is not None) == take_any
        loader.shutdown()
        assert not pool.slabs_page_locked
        return out, pinned

    pageable, unpinned = epochs(False)
    assert not any(unpinned) and len(pageable) == 26
    for options in ({}, {"split": True, "take_any": True}):
        locked, pinned = epochs(True, **options)
        assert all(pinned) and len(locked) == 26
        for a, b in zip(locked, pageable, strict=True):
            assert torch.equal(a, b), options
