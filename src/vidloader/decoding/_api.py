"""``decode_frames``: exact frames of one video by display index, as one tensor."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from ..index import StreamChoice, VideoRecord, probe_video
from ..processing import Geometry, Process, geometry, upright
from ._base import DecodeTask
from ._registry import get_executor


def decode_frames(
    path: str | os.PathLike,
    indices: Sequence[int] | np.ndarray | torch.Tensor,
    *,
    backend: str = "cpu",
    size: tuple[int, int] | None = None,
    index_record: VideoRecord | None = None,
    autorotate: bool = True,
    stream: StreamChoice = "best",
) -> torch.Tensor:
    """Decode frames ``indices`` (display order, any order, repeats allowed) of one video.

    Frames are decoded in ascending order, each needed GOP once, and returned in the order
    of ``indices``. On the CPU without ``size`` they are bit-exact with a full decode.

    Args:
        path: the video file.
        indices: display frame numbers in ``[0, num_frames)``.
        backend: ``"cpu"`` or ``"nvdec"``.
        size: ``(height, width)`` to resize to inside the conversion; ``None`` keeps the
            decoded size.
        index_record: the video's :class:`VideoRecord` if already known (skips the probe);
            its metadata is used for ``path``.
        autorotate: turn frames upright by the video's display rotation
            (``VideoRecord.rotation``), as players do; ``size`` is then the upright size.
            ``False``: frames as coded.
        stream: which video stream: ``"best"`` (the ``ffmpeg`` command line's choice),
            ``"first"`` or a stream index in the container (as :func:`vidloader.build_index`);
            ignored with ``index_record``, which names its stream.

    Returns:
        uint8 tensor ``N×H×W×3`` RGB (on the GPU for ``"nvdec"``).

    Raises:
        FrameIndexError: an index is negative or ``>= num_frames`` (names the file).
        VideoNotFoundError, CorruptVideoError, UnsupportedCodecError: naming the file.
    """
    record = _record_for(path, index_record, stream)
    idx = np.asarray(indices, np.int64).ravel()
    record.check_frames(idx)
    geom = geometry(Process(size=size, autorotate=autorotate), record.height, record.width,
                    rotation=record.rotation, path=record.path)
    if idx.size == 0:
        return torch.empty((0, *geom.out_hw, 3), dtype=torch.uint8)
    task = DecodeTask.for_frames(0, record, idx)
    unique = task.frames
    # Without size, frames are converted at the coded size (bit-exact with a full decode).
    out = _Collector(len(unique), geom.coded_hw if size is not None else None, geom)
    with get_executor(backend) as executor:
        executor.decode(task, lambda i, frame: out.put(int(np.searchsorted(unique, i)), frame))
    frames = out.result()
    if len(unique) == len(idx) and np.array_equal(unique, idx):
        return frames  # already sorted and unique: no reordering copy
    order = np.searchsorted(unique, idx)
    return frames[torch.from_numpy(order).to(frames.device)]


def _record_for(path: str | os.PathLike, record: VideoRecord | None, stream) -> VideoRecord:
    path = os.path.abspath(os.fspath(path))
    if record is None:
        return probe_video(path, stream=stream)
    return record if record.path == path else dataclasses.replace(record, path=path)


class _Collector:
    """Preallocated output filled by the sink: numpy for CPU frames, torch on the frame's
    device otherwise (NVDEC hands out CUDA tensors)."""

    def __init__(self, n: int, size: tuple[int, int] | None, geom: Geometry) -> None:
        self.n, self.size, self.geom = n, size, geom
        self.filled = 0
        self.buffer: Any = None

    def put(self, row: int, frame: Any) -> None:
        rgb = upright(frame.to_rgb(self.size), self.geom)
        if self.buffer is None:
            if isinstance(rgb, np.ndarray):
                self.buffer = np.empty((self.n, *rgb.shape), np.uint8)
            else:
                self.buffer = torch.empty(
                    (self.n, *rgb.shape), dtype=torch.uint8, device=rgb.device
                )
        self.buffer[row] = rgb
        self.filled += 1

    def result(self) -> torch.Tensor:
        if self.filled != self.n:  # an executor broke its contract; never return garbage
            raise RuntimeError(f"the executor delivered {self.filled} of {self.n} frames")
        if isinstance(self.buffer, np.ndarray):
            return torch.from_numpy(self.buffer)
        return self.buffer
