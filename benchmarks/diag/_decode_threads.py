"""Timing of GPU image decoders on threads, shared by the JPEG decode probes
(``jpeg_sources_probe.py``, ``jpeg_options_probe.py``, ``jpeg_engines_probe.py``)."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import torch


def time_decoders(decoders: list, plans: list[list], decode, device: torch.device,
                  batch: int = 256) -> tuple[float, list[float]]:
    """Each decoder on a thread and CUDA stream of its own decodes its list of ``plans``
    (``decode(decoder, plan)``, each batch synchronised, its output kept until then; the
    first plan once more before the clock starts). Returns images/s over all threads from a
    common start to the last thread's end, and each thread's own pace."""
    streams = [torch.cuda.Stream(device) for _ in decoders]
    barrier = threading.Barrier(len(decoders) + 1)
    seconds = [0.0] * len(decoders)

    def work(k):
        def once(plan):
            out = decode(decoders[k], plan)
            streams[k].synchronize()
            return out

        with torch.cuda.stream(streams[k]):
            once(plans[k][0])  # warm-up
            barrier.wait()
            t0 = time.perf_counter()
            for plan in plans[k]:
                once(plan)
            seconds[k] = time.perf_counter() - t0

    pool = [threading.Thread(target=work, args=(k,)) for k in range(len(decoders))]
    for t in pool:
        t.start()
    barrier.wait()
    t0 = time.perf_counter()
    for t in pool:
        t.join()
    total = sum(len(p) for p in plans) * batch / (time.perf_counter() - t0)
    return total, [len(p) * batch / s for p, s in zip(plans, seconds)]


def probe_folder(default_images: int = 4000, default_batches: int = 30,
                 root: str = "/tmp/jpeg-ab-x1") -> tuple:
    """The probes' arguments (``[images] [batches]``), their generated JPEG folder (500x375,
    10 classes; kept between runs) indexed, and every file's bytes read beforehand."""
    from vidloader.images import ImageFolder
    from vidloader.images._synthetic import write_image_folder

    count = int(sys.argv[1]) if len(sys.argv) > 1 else default_images
    batches = int(sys.argv[2]) if len(sys.argv) > 2 else default_batches
    folder = ImageFolder(write_image_folder(root, num_classes=10, per_class=count // 10),
                         progress=False)
    blobs = {i: Path(folder.path(i)).read_bytes() for i in range(len(folder))}
    return folder, blobs, batches
