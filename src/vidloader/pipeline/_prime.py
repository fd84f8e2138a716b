"""NVDEC primed once per process and GPU, in the background, while the first loader starts.

The first NVDEC decode in a process costs about 0.7-0.9 s more than any later one, whatever
the number of decoders: on the H200 one frame decoded before the loaders (CUDA already up)
took 1.24 s, and the program's first loader then gave its first batch 0.7 s sooner (2.92
against 3.63 s), like the loaders after it (``benchmarks/results/gpu/session13-10``).
Started by the loader's constructor on a thread of its own, that decode overlaps the workers'
start and the first units' demuxing, which come first anyway. Nothing waits for it: a decoder
thread that needs NVDEC before it is done waits for the same one-time set-up it would have
paid itself, and a prime that fails (a file gone, a driver error) is logged at debug level
and costs nothing else. ``VIDLOADER_NVDEC_PRIME=0`` turns it off.
"""

from __future__ import annotations

import logging
import os
import threading

from ..index import VideoIndex

log = logging.getLogger(__name__)

_PRIMED: set[int] = set()  # GPUs primed (or being primed) in this process
_LOCK = threading.Lock()


def prime_nvdec(index: VideoIndex, refused: dict[int, str], gpu: int) -> threading.Thread | None:
    """Decode one frame of the index's first video NVDEC takes, on ``gpu``, on a daemon
    thread; once per process and GPU. Returns the thread, or ``None`` when there is nothing to
    do (already primed, turned off, no video for NVDEC)."""
    if os.environ.get("VIDLOADER_NVDEC_PRIME", "1") == "0":
        return None
    video = next((v for v in range(len(index)) if v not in refused), None)
    if video is None:
        return None
    with _LOCK:
        if gpu in _PRIMED:
            return None
        _PRIMED.add(gpu)
    thread = threading.Thread(target=_prime, args=(index[video], gpu),
                              name="vidloader-nvdec-prime", daemon=True)
    thread.start()
    return thread


def _prime(record, gpu: int) -> None:
    import torch

    from ..decoding import get_executor

    try:
        with torch.cuda.device(gpu), get_executor("nvdec", device=gpu, num_decoders=1) as executor:
            executor.decode(_task(record), lambda i, frame: frame.to_rgb(None))
        torch.cuda.synchronize(gpu)
    except Exception as exc:  # noqa: BLE001 - a prime is an optimisation: never an error
        log.debug("NVDEC prime on GPU %d with %s failed: %r", gpu, record.path, exc)


def _task(record):
    """The prime's work: the video's first frame (a test replaces it)."""
    from ..decoding import DecodeTask

    return DecodeTask.for_frames(0, record, [0])
