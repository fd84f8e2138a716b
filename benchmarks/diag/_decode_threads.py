"""Timing of GPU image decoders on threads, shared by the JPEG decode probes
(``jpeg_sources_probe.py``, ``jpeg_options_probe.py``, ``jpeg_engines_probe.py``)."""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from pathlib import Path

import torch


def time_decoders(decoders: list, plans: list[list], decode, device: torch.device,
                  seconds: float = 3.0, batch: int = 256, priority: int = 0) -> tuple[float, list[float]]:
    """Each decoder on a thread and CUDA stream of its own decodes its ``plans`` in turn,
    over and over (``decode(decoder, plan)``, each batch synchronised, its output kept until
    then; the first plan once before the clock starts), until ``seconds`` after a common
    start; a batch under way then is finished and counted. Returns images/s summed over the
    threads, and each thread's own pace: threads that do not slow each other add up. An error
    on a thread stops the others and is raised here. ``priority``: the threads' CUDA streams'
    (lower is sooner; 0 the default)."""
    streams = [torch.cuda.Stream(device, priority=priority) for _ in decoders]
    barrier = threading.Barrier(len(decoders) + 1)
    stop = threading.Event()
    counts = [0] * len(decoders)
    errors: list[BaseException] = []

    def work(k):
        def once(plan):
            out = decode(decoders[k], plan)
            streams[k].synchronize()
            return out

        try:
            with torch.cuda.stream(streams[k]):
                once(plans[k][0])  # warm-up
                barrier.wait()
                n = 0
                while not stop.is_set():
                    once(plans[k][n % len(plans[k])])
                    n += 1
                counts[k] = n
        except threading.BrokenBarrierError:
            pass  # another thread failed first
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            errors.append(exc)
            stop.set()
            barrier.abort()

    pool = [threading.Thread(target=work, args=(k,)) for k in range(len(decoders))]
    for t in pool:
        t.start()
    with contextlib.suppress(threading.BrokenBarrierError):  # a thread failed: raised below
        barrier.wait()
    t0 = time.perf_counter()
    stop.wait(seconds)
    stop.set()
    for t in pool:
        t.join()
    elapsed = time.perf_counter() - t0
    if errors:
        raise errors[0]
    return sum(counts) * batch / elapsed, [n * batch / elapsed for n in counts]


def probe_folder(default_images: int = 4000, default_batches: int = 30,
                 root: str = "/tmp/jpeg-ab-x1") -> tuple:
    """The probes' arguments (``[images] [batches]``: batches drawn per thread, decoded in
    turn for the timed seconds), their generated JPEG folder (500x375,
    10 classes; kept between runs) indexed, and every file's bytes read beforehand."""
    from vidloader.images import ImageFolder
    from vidloader.images._synthetic import write_image_folder

    count = int(sys.argv[1]) if len(sys.argv) > 1 else default_images
    batches = int(sys.argv[2]) if len(sys.argv) > 2 else default_batches
    folder = ImageFolder(write_image_folder(root, num_classes=10, per_class=count // 10),
                         progress=False)
    blobs = {i: Path(folder.path(i)).read_bytes() for i in range(len(folder))}
    return folder, blobs, batches


def hw_decoder(device: torch.device):
    """An ``NvImageCodecDecoder`` offering nvImageCodec's hardware backend only (the
    constructor reads the module's ``BACKENDS``)."""
    from vidloader.images import _nvimgcodec

    saved = _nvimgcodec.BACKENDS
    _nvimgcodec.BACKENDS = ("HW_GPU_ONLY",)
    try:
        return _nvimgcodec.NvImageCodecDecoder(device)
    finally:
        _nvimgcodec.BACKENDS = saved
