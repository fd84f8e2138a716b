"""The GPU image pool in worker processes (``pipeline/_image_gpu_workers.py``): each worker
decodes and augments whole batches into slots shared with the loader's process. On the CPU the
same pool runs with Pillow standing in for nvImageCodec and shared-memory slots; on a GPU
(cuda marker) with nvImageCodec and CUDA IPC slots."""

from __future__ import annotations

import functools
import io

import numpy as np
import pytest
import torch
from PIL import Image

from vidloader import ImageLoader, RandomFrames, SequentialFrames, WorkerError
from vidloader.images import ImageFolder, ImageProcess
from vidloader.images._pillow import PillowFiles
from vidloader.images._synthetic import natural_like
from vidloader.pipeline import _image_loader
from vidloader.pipeline._image_gpu_workers import GpuImageProcessPool


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """Three classes of 48x64 JPEGs (one PNG), a truncated JPEG and a text file."""
    root = tmp_path_factory.mktemp("images")
    rng = np.random.default_rng(3)
    for k in range(3):
        (root / f"c{k}").mkdir()
        for i in range(5):
            Image.fromarray(natural_like(48, 64, rng)).save(root / f"c{k}" / f"{i}.jpg", quality=90)
    Image.fromarray(natural_like(48, 64, rng)).save(root / "c0" / "plain.png")
    good = io.BytesIO()
    Image.fromarray(natural_like(48, 64, rng)).save(good, format="JPEG", quality=90)
    (root / "c1" / "truncated.jpg").write_bytes(good.getvalue()[: len(good.getvalue()) // 2])
    (root / "c2" / "not_an_image.jpg").write_text("hello")
    return root


class _Broken(PillowFiles):
    """Fails on its second batch (a module-level class: it travels to the workers by name)."""

    calls = 0

    def decode_files(self, paths):
        _Broken.calls += 1
        if _Broken.calls >= 2:
            raise RuntimeError("decoder broke")
        return super().decode_files(paths)


class _PillowBytes(PillowFiles):
    """Decodes bytes only (as nvImageCodec's ``decode``); paths raise. Module-level: it
    travels to the workers by name."""

    def decode(self, blobs):
        assert all(b is None or isinstance(b, bytes) for b in blobs)
        return [None if b is None else super(_PillowBytes, self).decode_files([b])[0]
                for b in blobs]

    def decode_files(self, paths):
        raise AssertionError("a worker handed its decoder paths, not the files' bytes")


class _PillowPacked(_PillowBytes):
    """Decodes a batch's bytes into one buffer at the index's sizes (as nvImageCodec's
    ``decode_packed``); ``decode`` raises, so only a packed batch gets through."""

    decodes_packed = True

    def decode(self, blobs):
        raise AssertionError("a worker asked for a list of images, not a packed batch")

    def decode_packed(self, blobs, sizes):
        from vidloader.images._packed import PackedImages

        packed = PackedImages.allocate(sizes, torch.device("cpu"))
        for row, image in enumerate(_PillowBytes.decode(self, blobs)):
            if image is None:
                packed.missing[row] = True
            else:
                packed[row].copy_(image)
        return packed


_READS: list[str] = []  # in a worker: the thread each file was read on


def _record_reads() -> None:
    """In a worker: each file read records its thread (``read_file`` is looked up when called)."""
    import threading

    from vidloader.pipeline import _image_gpu_workers as workers

    real = workers.read_file
    if getattr(real, "records", False):
        return

    def read_file(path):
        _READS.append(threading.current_thread().name)
        return real(path)
    read_file.records = True
    workers.read_file = read_file


def _check_reads(read_ahead: bool) -> None:
    """In a worker, before a decode: every file so far read on the read-ahead thread
    (``read_ahead``), or none of them there."""
    threads = set(_READS)
    ahead = threads == {"vidloader-read-ahead"} if read_ahead else "vidloader-read-ahead" not in threads
    assert _READS and ahead, f"files read on {threads}"


class _PackedReads(_PillowPacked):
    """:class:`_PillowPacked` that fails unless its worker read the files where ``read_ahead``
    says: all on its read-ahead thread, or none there."""

    def __init__(self, device=None, *, read_ahead: bool):
        super().__init__(device)
        _record_reads()
        self.read_ahead = read_ahead

    def decode_packed(self, blobs, sizes):
        _check_reads(self.read_ahead)
        return super().decode_packed(blobs, sizes)


class _BytesReads(_PillowBytes):
    """:class:`_PillowBytes` that fails unless its worker read the files where ``read_ahead``
    says."""

    def __init__(self, device=None, *, read_ahead: bool):
        super().__init__(device)
        _record_reads()
        self.read_ahead = read_ahead

    def decode(self, blobs):
        _check_reads(self.read_ahead)
        return super().decode(blobs)


def _process_pool(monkeypatch, make_decoder=PillowFiles):
    """Make Pillow loaders (CPU) use the GPU image pool's worker processes, ``make_decoder``
    standing in for nvImageCodec."""
    def make(config, num_slots, decoder=None):
        return GpuImageProcessPool(config, num_slots, make_decoder=make_decoder)
    monkeypatch.setattr(_image_loader, "make_image_pool", make)


def _equal(a, b) -> None:
    assert torch.equal(a["images"], b["images"])
    assert torch.equal(a["sample_index"], b["sample_index"]) and torch.equal(a["label"], b["label"])


@pytest.mark.parametrize("proc", [
    ImageProcess(size=(40, 40), crop="random_resized", random_flip=True),
    ImageProcess(size=(32, 32), crop="center", dtype="float32", normalized=True,
                 mean=(0.5, 0.4, 0.3), std=(0.2, 0.3, 0.4), layout="chw"),
])
def test_worker_processes_give_the_in_process_batches_in_order(folder, monkeypatch, proc):
    """Three workers filling batches of 4 (the finished dtype and layout in the slots) give
    the batches of Pillow in this process, in order, bad files skipped and counted."""
    ds = ImageFolder(folder, num_workers=0, progress=False, on_error="skip")
    reference = list(ImageLoader(ds, batch_size=4, processing=proc, num_workers=0,
                                 on_error="skip", sampler=RandomFrames(seed=5)))
    _process_pool(monkeypatch)
    loader = ImageLoader(ds, batch_size=4, processing=proc, num_workers=3, on_error="skip",
                         sampler=RandomFrames(seed=5))
    batches = list(loader)
    assert len(batches) == len(reference) and loader.stats["skipped_samples"] == 1
    for x, y in zip(reference, batches, strict=True):
        _equal(x, y)
    stats = loader.stats  # rows handed to the decoder: the skipped one too
    assert stats["rows_by_executor"] == {"pillow": stats["samples"] + stats["skipped_samples"]}


def test_workers_give_a_decoder_that_takes_bytes_the_files_bytes(folder, monkeypatch):
    """Where the decoder has ``decode`` (nvImageCodec), a worker reads its batch's files and
    hands it their bytes (``WORKERS_READ_BYTES``); a file it cannot read reaches the decoder
    as ``None`` and is skipped. The batches are the in-process pool's."""
    ds = ImageFolder(folder, num_workers=0, progress=False, on_error="skip")
    proc = ImageProcess(size=(40, 40), crop="random_resized", random_flip=True)
    reference = list(ImageLoader(ds, batch_size=4, processing=proc, num_workers=0,
                                 on_error="skip", sampler=RandomFrames(seed=5)))
    _process_pool(monkeypatch, make_decoder=_PillowBytes)
    loader = ImageLoader(ds, batch_size=4, processing=proc, num_workers=2, on_error="skip",
                         sampler=RandomFrames(seed=5))
    for x, y in zip(reference, list(loader), strict=True):
        _equal(x, y)
    assert loader.stats["skipped_samples"] == 1


def test_workers_decode_packed_batches_where_the_decoder_can(folder, monkeypatch):
    """A decoder with ``decode_packed`` (nvImageCodec 0.9) gets each batch's bytes and the
    index's sizes, and its packed batches give the in-process pool's batches."""
    ds = ImageFolder(folder, num_workers=0, progress=False, on_error="skip")
    proc = ImageProcess(size=(40, 40), crop="random_resized", random_flip=True)
    reference = list(ImageLoader(ds, batch_size=4, processing=proc, num_workers=0,
                                 on_error="skip", sampler=RandomFrames(seed=5)))
    _process_pool(monkeypatch, make_decoder=_PillowPacked)
    loader = ImageLoader(ds, batch_size=4, processing=proc, num_workers=2, on_error="skip",
                         sampler=RandomFrames(seed=5))
    for x, y in zip(reference, list(loader), strict=True):
        _equal(x, y)
    assert loader.stats["skipped_samples"] == 1


@pytest.mark.parametrize("read_ahead", [True, False])
@pytest.mark.parametrize("decoder", [_PackedReads, _BytesReads])
def test_workers_reading_ahead_give_the_same_batches(folder, monkeypatch, decoder, read_ahead):
    """With ``WORKERS_READ_AHEAD`` (the default), a worker reads its next task's files on a
    thread while it fills the current one; without, just before. The batches, the skipped
    file and the order are the same either way."""
    from vidloader.pipeline import _image_gpu_workers

    ds = ImageFolder(folder, num_workers=0, progress=False, on_error="skip")
    proc = ImageProcess(size=(40, 40), crop="random_resized", random_flip=True)
    reference = list(ImageLoader(ds, batch_size=4, processing=proc, num_workers=0,
                                 on_error="skip", sampler=RandomFrames(seed=5)))
    monkeypatch.setattr(_image_gpu_workers, "WORKERS_READ_AHEAD", read_ahead)
    _process_pool(monkeypatch, make_decoder=functools.partial(decoder, read_ahead=read_ahead))
    loader = ImageLoader(ds, batch_size=4, processing=proc, num_workers=2, on_error="skip",
                         sampler=RandomFrames(seed=5), prefetch=3, persistent_workers=True)
    for x, y in zip(reference, list(loader), strict=True):
        _equal(x, y)
    assert loader.stats["skipped_samples"] == 1
    from vidloader.bench._images import _pool_settings

    assert _pool_settings(loader._pool) == {"pool": "GpuImageProcessPool",
                                            "workers_read_ahead": read_ahead}
    loader.shutdown()


def test_read_ahead_reads_on_its_own_thread_in_order(monkeypatch):
    """``read_ahead`` yields the tasks in order with their plans' bytes, read on the
    ``vidloader-read-ahead`` thread; a task whose files cannot be listed comes with the
    exception; ``STOP`` ends it."""
    import queue
    import threading
    from types import SimpleNamespace

    from vidloader.pipeline import _image_gpu_workers
    from vidloader.pipeline._messages import STOP

    readers = []

    def read_file(path):
        readers.append(threading.current_thread().name)
        return path.encode()

    class Dataset:
        def path(self, i):
            if i < 0:
                raise IndexError(f"no file {i}")
            return f"file{i}"

    monkeypatch.setattr(_image_gpu_workers, "read_file", read_file)
    plan = lambda *ids: SimpleNamespace(video_indices=np.array(ids))  # noqa: E731
    tasks = [SimpleNamespace(n=0, plans=[plan(1, 2), plan(3)]), SimpleNamespace(n=1, plans=[plan(-1)]),
             SimpleNamespace(n=2, plans=[plan(4)])]
    task_q = queue.Queue()
    for task in [*tasks, STOP]:
        task_q.put(task)
    got = list(_image_gpu_workers.read_ahead(task_q, Dataset()))
    assert [t.n for t, _ in got] == [0, 1, 2]
    assert got[0][1] == [[b"file1", b"file2"], [b"file3"]] and got[2][1] == [[b"file4"]]
    assert isinstance(got[1][1], IndexError)
    assert readers and set(readers) == {"vidloader-read-ahead"}


def test_read_ahead_ends_the_worker_when_its_thread_fails():
    """A task queue that breaks under the read-ahead thread ends the generator with that
    error (the worker then dies and the loader reports it), instead of a wait for good."""
    from vidloader.pipeline import _image_gpu_workers

    class Broken:
        def get(self):
            raise EOFError("the task queue broke")

    with pytest.raises(EOFError, match="broke"):
        list(_image_gpu_workers.read_ahead(Broken(), None))


def test_worker_processes_resume_and_persist(folder, monkeypatch):
    """A state_dict taken mid-epoch resumes in a new loader on the pool's workers; persistent
    workers serve a second epoch; shutdown joins every worker."""
    ds = ImageFolder(folder, num_workers=0, progress=False, on_error="skip")
    proc = ImageProcess(size=(40, 40), crop="random", padding=4, random_flip=True)
    inline = ImageLoader(ds, batch_size=3, processing=proc, num_workers=0, on_error="skip",
                         sampler=SequentialFrames())
    reference, reference_next = list(inline), list(inline)  # epochs 0 and 1 (other crops)
    _process_pool(monkeypatch)
    first = ImageLoader(ds, batch_size=3, processing=proc, num_workers=2, on_error="skip",
                        sampler=SequentialFrames(), persistent_workers=True)
    it = iter(first)
    head = [next(it), next(it)]
    state = first.state_dict()
    procs = list(first._pool.procs)
    rest = list(it)
    again = list(first)  # a second epoch on the same workers
    assert list(first._pool.procs) == procs
    first.shutdown()
    assert all(not p.is_alive() for p in procs)
    for x, y in zip(reference, head + rest, strict=True):
        _equal(x, y)
    for x, y in zip(reference_next, again, strict=True):
        _equal(x, y)
    resumed = ImageLoader(ds, batch_size=3, processing=proc, num_workers=2, on_error="skip",
                          sampler=SequentialFrames())
    resumed.load_state_dict(state)
    for x, y in zip(reference[2:], list(resumed), strict=True):
        _equal(x, y)


def test_a_decoder_error_in_a_worker_reaches_the_loader(folder, monkeypatch):
    """A worker's decoder raising reaches the loader as a WorkerError with the worker's
    message, and the loader's shutdown leaves no worker running."""
    ds = ImageFolder(folder, num_workers=0, progress=False, on_error="skip")
    _process_pool(monkeypatch, make_decoder=_Broken)
    loader = ImageLoader(ds, batch_size=2, processing=ImageProcess(size=(40, 40)),
                         num_workers=1, on_error="skip")
    with pytest.raises(WorkerError, match="decoder broke"):
        list(loader)
    loader.shutdown()


def test_nvimgcodec_takes_worker_processes_by_default():
    """``decoder="nvimgcodec"`` defaults to GPU_IMAGE_WORKERS processes; Pillow to a process
    per core."""
    assert _image_loader._default_workers("nvimgcodec") == _image_loader.GPU_IMAGE_WORKERS
    assert _image_loader._default_workers("pillow") >= 1


def test_pillow_files_decodes_like_decode_image(folder):
    from vidloader.images import decode_image

    dec = PillowFiles("cpu")
    paths = [str(folder / "c0" / "0.jpg"), str(folder / "c0" / "plain.png"),
             str(folder / "c1" / "truncated.jpg"), str(folder / "c2" / "not_an_image.jpg")]
    out = dec.decode_files(paths)
    assert torch.equal(out[0], torch.from_numpy(decode_image(paths[0])[0]))
    assert torch.equal(out[1], torch.from_numpy(decode_image(paths[1])[0]))
    assert out[3] is None  # truncated JPEGs Pillow may decode partially or refuse
    with pytest.raises(ValueError, match="CPU"):
        PillowFiles("cuda")


@pytest.mark.cuda
def test_nvimgcodec_worker_processes_equal_the_in_process_pool(folder):
    """nvImageCodec in two worker processes, slots shared by CUDA IPC, gives the in-process
    pool's batches bit for bit (same decoder, same kernels), in order; shutdown joins them."""
    pytest.importorskip("nvidia.nvimgcodec")
    ds = ImageFolder(folder, num_workers=0, progress=False, on_error="skip")
    proc = ImageProcess(size=(40, 40), crop="random_resized", random_flip=True, dtype="float32",
                        normalized=True, layout="chw")

    def run(workers):
        loader = ImageLoader(ds, batch_size=4, processing=proc, device="cuda", num_workers=workers,
                             decoder="nvimgcodec", on_error="skip", sampler=RandomFrames(seed=2))
        it = iter(loader)
        out = [{k: v.cpu() for k, v in next(it).items()}]
        # The epoch's workers, asked for while it runs: the pool closes at the epoch's end.
        procs = list(getattr(loader._pool, "procs", []) or [])
        assert len(procs) == workers
        out += [{k: v.cpu() for k, v in b.items()} for b in it]
        out2 = [{k: v.cpu() for k, v in b.items()} for b in loader]  # a second epoch
        loader.shutdown()
        assert all(not p.is_alive() for p in procs)
        return out + out2

    inline, workers = run(0), run(2)
    assert len(inline) == len(workers)
    for x, y in zip(inline, workers, strict=True):
        assert torch.equal(x["sample_index"], y["sample_index"])
        assert torch.allclose(x["images"], y["images"], atol=1e-5)


def test_workers_take_the_loaders_nvimgcodec_settings(monkeypatch):
    """The default worker decoder carries the loader process's nvImageCodec settings (options,
    hardware share, CPU threads, backends) and its ``CUDA_RESIZE``, and applies them in the
    worker before making the decoder, whatever the worker's copy of the modules holds."""
    import pickle

    from vidloader.images import _batched, _nvimgcodec
    from vidloader.pipeline import _image_gpu_workers

    monkeypatch.setattr(_nvimgcodec, "DECODER_OPTIONS", ":fancy_upsampling=0")
    monkeypatch.setattr(_nvimgcodec, "DEFAULT_HW_LOAD", 0.5)
    monkeypatch.setattr(_batched, "CUDA_RESIZE", "matmul")
    make = pickle.loads(pickle.dumps(_image_gpu_workers.loader_nvimgcodec_decoder()))
    monkeypatch.setattr(_batched, "CUDA_RESIZE", "triton")  # the worker's copy
    assert set(make.keywords["settings"]) == set(_image_gpu_workers.NVIMGCODEC_SETTINGS)
    seen = {}

    class Stub:
        def __init__(self, device):
            seen.update(options=_nvimgcodec.DECODER_OPTIONS, hw_load=_nvimgcodec.DEFAULT_HW_LOAD)

    monkeypatch.setattr(_nvimgcodec, "DECODER_OPTIONS", "")  # the worker's copy
    monkeypatch.setattr(_nvimgcodec, "DEFAULT_HW_LOAD", 1.0)
    monkeypatch.setattr(_nvimgcodec, "NvImageCodecDecoder", Stub)
    assert isinstance(make(torch.device("cpu")), Stub)
    assert seen == {"options": ":fancy_upsampling=0", "hw_load": 0.5}
    assert _batched.CUDA_RESIZE == "matmul"  # the augmentation's setting too
