"""Where the GPU JPEG pipeline's time goes (issue 15): each stage of ``BatchDecodePool``
timed alone on the same batches, then the whole loader, on one GPU.

Stages, per batch of 256 generated ImageNet-like JPEGs (500×375, quality 90):
  read      the files' bytes (8 threads, as the pool's readers);
  parse     ``nvimgcodec.CodeStream`` per blob;
  decode    ``Decoder.decode`` on parsed streams, synchronised (the hardware and CUDA backends);
  tensor    ``torch.as_tensor`` per decoded image;
  augment   ``fill_from_images`` (224² random resized crop + flip + normalize) on decoded
            images, synchronised;
  loader    ``ImageLoader(decoder="nvimgcodec")`` over several epochs.
Also: whether ``decode`` lets other Python threads run (a counting thread's progress while it
decodes, against its progress while the main thread sleeps).

Usage (on the device): ``python3 benchmarks/diag/jpeg_stages.py [files] [batches]``; prints
a line per stage and writes ``$OUT/jpeg_stages.json``.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import torch

from vidloader.bench._images import _rrc_proc
from vidloader.images import ImageFolder
from vidloader.images._nvimgcodec import NvImageCodecDecoder
from vidloader.images._synthetic import write_image_folder
from vidloader.pipeline import ImageLoader
from vidloader.pipeline._image_fill import fill_from_images, read_file
from vidloader.sampling import SequentialFrames

BATCH = 256


def _timed(name: str, results: dict, images: int, call, warm=None) -> object:
    """``call()`` timed (synchronised before and after), after ``warm()`` untimed: first
    calls build cuBLAS handles, load kernels and grow allocator pools."""
    if warm is not None:
        warm()
    torch.cuda.synchronize()
    start = time.perf_counter()
    value = call()
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    results[name] = {"seconds": seconds, "images_per_s": images / seconds,
                     "ms_per_batch": 1e3 * seconds * BATCH / images}
    print(f"{name:<34} {images / seconds:>10,.0f} images/s  "
          f"{results[name]['ms_per_batch']:7.2f} ms/batch", flush=True)
    return value


def _gil_share(decoder, streams) -> dict:
    """A counting thread's increments per second while the main thread decodes, against
    while it sleeps: near 1 means ``decode`` releases the GIL."""
    counts, stop = [0], threading.Event()

    def count():
        while not stop.is_set():
            counts[0] += 1

    worker = threading.Thread(target=count)
    worker.start()
    time.sleep(0.2)
    counts[0], start = 0, time.perf_counter()
    time.sleep(0.5)
    idle_rate = counts[0] / (time.perf_counter() - start)
    counts[0], start = 0, time.perf_counter()
    for batch in streams:
        decoder._decoder.decode(batch, params=decoder._params)
    torch.cuda.synchronize()
    busy_rate = counts[0] / (time.perf_counter() - start)
    stop.set()
    worker.join()
    return {"count_rate_idle": idle_rate, "count_rate_while_decoding": busy_rate,
            "ratio": busy_rate / idle_rate}


def main() -> None:
    files = int(sys.argv[1]) if len(sys.argv) > 1 else 6000
    batches = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    out = Path(os.environ.get("OUT", "/tmp"))
    root = write_image_folder(Path("/tmp/jpeg-stages"), num_classes=10, per_class=files // 10)
    folder = ImageFolder(root)
    n = batches * BATCH
    paths = [folder.path(i % len(folder)) for i in range(n)]
    results: dict = {"files": len(folder), "batches": batches, "gpu": torch.cuda.get_device_name()}
    decoder = NvImageCodecDecoder(torch.device("cuda", 0))
    decoder.decode([read_file(paths[0])])  # initialise the backends

    _timed("read (1 thread)", results, n, lambda: [read_file(p) for p in paths],
           warm=lambda: [read_file(p) for p in paths[:512]])
    for threads in (2,):
        with ThreadPoolExecutor(threads) as pool:
            blobs = _timed(f"read ({threads} threads)", results, n,
                           lambda pool=pool: list(pool.map(read_file, paths)),
                           warm=lambda pool=pool: list(pool.map(read_file, paths[:512])))
    with ThreadPoolExecutor(8) as pool:
        code_stream = decoder._code_stream
        _timed("CodeStream(path), 8 threads", results, n,
               lambda: list(pool.map(code_stream, paths)),
               warm=lambda: list(pool.map(code_stream, paths[:512])))
    _timed("CodeStream(path), 1 thread", results, n // 4,
           lambda: [code_stream(p) for p in paths[: n // 4]])
    cuts = [blobs[i:i + BATCH] for i in range(0, n, BATCH)]
    streams = _timed("parse (CodeStream(bytes))", results, n,
                     lambda: [[decoder._parse(b) for b in cut] for cut in cuts])

    def decode_all(batches):
        return [decoder._decoder.decode(s, params=decoder._params) for s in batches]
    decoded = _timed("decode (nvimgcodec)", results, n, lambda: decode_all(streams),
                     warm=lambda: decode_all(streams[:3]))
    tensors = _timed("tensor (as_tensor)", results, n, lambda: [
        [torch.as_tensor(x, device=decoder.device) for x in batch] for batch in decoded])
    _timed("tensor (from_dlpack)", results, n, lambda: [
        [torch.from_dlpack(x) for x in batch] for batch in decoded])
    _timed("decode whole (parse+decode+tensor)", results, n,
           lambda: [decoder.decode(cut) for cut in cuts])
    def by_path():
        return [len(decoder.decode_files(paths[i:i + BATCH])) for i in range(0, n, BATCH)]
    _timed("decode_files (open+decode+tensor, dropped)", results, n, by_path,
           warm=lambda: decoder.decode_files(paths[:BATCH]))
    two = [streams[i] + streams[i + 1] for i in range(0, len(streams) - 1, 2)]
    _timed("decode, 512 per call", results, 2 * BATCH * len(two), lambda: decode_all(two))

    loader = ImageLoader(folder, batch_size=BATCH, processing=_rrc_proc(), device="cuda",
                         decoder="nvimgcodec", sampler=SequentialFrames())
    config = loader.config
    plans = [loader._epoch_plan(0).batch(b % len(loader)) for b in range(batches)]
    rgb = [[x.expand(*x.shape[:2], 3) if x.shape[2] == 1 else x for x in batch]
           for batch in tensors]
    slot = torch.empty((BATCH, 3, 224, 224), device="cuda")

    def augment(count=batches):
        for plan, images in list(zip(plans, rgb))[:count]:
            if plan.batch_size == len(images):
                fill_from_images(config, "nvimgcodec", images, plan, slot[:plan.batch_size])
    from vidloader.images import _batched
    for packing in ("gather", "copies"):
        _batched.PACKING = packing
        _timed(f"augment (fill_from_images, {packing})", results, n, augment,
               warm=lambda: augment(3))
    results["gil"] = _gil_share(decoder, streams[:6])
    print(f"gil: {results['gil']}", flush=True)

    _instrument(results)
    from vidloader.pipeline import _image_decode
    variants = [("2 decode lanes", "gather", True, 2), ("1 decode lane", "gather", True, 1),
                ("3 decode lanes", "gather", True, 3), ("2 decode lanes, again", "gather", True, 2)]
    for label, packing, opens, lanes in variants:
        _batched.PACKING = packing
        _image_decode.NVIMGCODEC_LANES = lanes
        _image_decode.BatchDecodePool._opens_files = property(lambda self, o=opens: o)
        loader = ImageLoader(folder, batch_size=BATCH, processing=_rrc_proc(), device="cuda",
                             decoder="nvimgcodec", drop_last=True, persistent_workers=True)
        it = _epochs(loader)
        for _ in range(3):
            next(it)
        SPENT.clear()
        COUNTS.clear()
        _timed(f"loader ({label})", results, n,
               lambda it=it: [next(it) for _ in range(batches)])
        loader.shutdown()
        spent = {k: round(1e3 * v / max(1, COUNTS[k]), 2) for k, v in SPENT.items()}
        results[f"loader ({label}) ms per call"] = spent
        print(f"  ms per call: {spent}", flush=True)
    (out / "jpeg_stages.json").write_text(json.dumps(results, indent=1))


SPENT: dict = {}
COUNTS: dict = {}


def _clocked(name: str, fn):
    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            SPENT[name] = SPENT.get(name, 0.0) + time.perf_counter() - start
            COUNTS[name] = COUNTS.get(name, 0) + 1
    return wrapper


def _instrument(results: dict) -> None:
    """Clock the loader's stages where they run: each decode lane's open and decode, the
    augmentation thread's augmentation, the main thread's wait for a finished batch
    (the pool of session 13: lanes and an augmentation thread)."""
    from concurrent.futures import Future

    from vidloader.pipeline import _image_decode

    pool_cls = _image_decode.BatchDecodePool
    pool_cls._decode = _clocked("decode lane: open and decode", pool_cls._decode)
    _image_decode.fill_from_images = _clocked("augmentation thread: augment",
                                              _image_decode.fill_from_images)
    original_result = Future.result

    def result(self, timeout=None):
        if threading.current_thread() is threading.main_thread():
            return _clocked("main: wait for a finished batch", original_result)(self, timeout)
        return original_result(self, timeout)
    Future.result = result


def _epochs(loader):
    while True:
        yield from loader


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
