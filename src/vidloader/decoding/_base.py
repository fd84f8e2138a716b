"""The executor contract shared by every decoding backend (cpu, nvdec, …).

An executor receives a :class:`DecodeTask` (one video, the GOPs to enter and the display frame
numbers wanted in each) and hands every wanted frame, once, to a sink as a
:class:`DecodedFrame`. Converting to RGB at the output size happens only for delivered frames,
through ``DecodedFrame.to_rgb(size)``: on the CPU that is swscale scaling straight to the output
size (the resize pushdown); on NVDEC a fused GPU kernel.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Callable
from typing import Any, ClassVar, Literal, Protocol

import numpy as np

from ..index import VideoRecord


@dataclasses.dataclass(frozen=True, eq=False)
class GopRequest:
    """Frames wanted from one GOP.

    Attributes:
        keyframe (int): display index of the GOP's keyframe, where decoding starts.
        frames (np.ndarray): int64 sorted, unique display indices wanted (all ``>= keyframe``
            and before the next keyframe).
    """

    keyframe: int
    frames: np.ndarray

    @property
    def last(self) -> int:
        return int(self.frames[-1])


@dataclasses.dataclass(frozen=True, eq=False)
class DecodeTask:
    """All frames wanted from one video, grouped by GOP in ascending order.

    Attributes:
        video_index (int): position of the video in the index.
        record (VideoRecord): the video's metadata (path, pts, keyframes …).
        gops (tuple[GopRequest, ...]): sorted by keyframe; no GOP appears twice.
    """

    video_index: int
    record: VideoRecord
    gops: tuple[GopRequest, ...]

    @classmethod
    def for_frames(cls, video_index: int, record: VideoRecord, frame_indices) -> DecodeTask:
        """The task for some frames of one video (any order, duplicates allowed): the frames
        sorted and unique, split by the GOP (keyframe) they belong to.

        Raises:
            FrameIndexError: a frame index is outside ``[0, record.num_frames)``.
        """
        frames = np.asarray(frame_indices, np.int64).ravel()
        record.check_frames(frames)
        frames = np.unique(frames)
        if frames.size == 0:
            return cls(int(video_index), record, ())
        keys = record.keyframes[np.searchsorted(record.keyframes, frames, side="right") - 1]
        cuts = np.flatnonzero(np.diff(keys)) + 1
        gops = tuple(
            GopRequest(keyframe=int(k[0]), frames=f)
            for k, f in zip(np.split(keys, cuts), np.split(frames, cuts))
        )
        return cls(int(video_index), record, gops)

    @property
    def path(self) -> str:
        return self.record.path

    @property
    def frames(self) -> np.ndarray:
        return np.concatenate([g.frames for g in self.gops]) if self.gops else np.empty(0, np.int64)


class DecodedFrame(Protocol):
    """A frame handed to a sink. Valid only during the sink call; convert or copy it there."""

    def to_rgb(self, size: tuple[int, int] | None = None) -> Any:
        """RGB uint8 ``H×W×3`` (numpy on CPU, torch CUDA tensor on NVDEC), resized to
        ``size = (height, width)`` inside the conversion when given."""

    def planes(self) -> Any:
        """The decoder's native picture without conversion (for exactness checks)."""


#: A sink receives ``(frame_index, frame)`` for every wanted frame of a task, in ascending order.
FrameSink = Callable[[int, DecodedFrame], None]


@dataclasses.dataclass
class DecodeStats:
    """Counters an executor keeps: how much work each delivered frame cost."""

    tasks: int = 0
    seeks: int = 0
    packets: int = 0
    decoded: int = 0
    skipped: int = 0
    delivered: int = 0

    def add(self, other: DecodeStats) -> None:
        for f in dataclasses.fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    @property
    def decoded_per_delivered(self) -> float:
        return self.decoded / self.delivered if self.delivered else float("nan")


class Executor(abc.ABC):
    """Decodes tasks. One executor object serves one thread; create one per worker.

    Every executor decodes one task at a time (:meth:`decode`). One that can take a unit's
    tasks at once says so in :attr:`batch_api`, and implements the matching method:

    - ``"tasks"``: none; the caller decodes task by task;
    - ``"frames"``: ``decode_batch(tasks, sink, *, bundles)``, synchronous, ``sink(pos, i,
      frame)`` per wanted frame;
    - ``"gops"``: ``submit_batch(tasks, gop_sink, *, bundles) -> PendingBatch``, asynchronous
      (``wait()``, ``cancel()``), ``gop_sink(pos, indices, frames)`` once per GOP; also
      ``decode_bundle(task, bundle, sink)`` for packets demuxed elsewhere.
    """

    #: Backend name (``"cpu"``, ``"nvdec"``).
    name: str = ""
    #: How the executor takes a unit's tasks at once (see the class docstring).
    batch_api: ClassVar[Literal["tasks", "frames", "gops"]] = "tasks"

    def __init__(self) -> None:
        self.stats = DecodeStats()

    @abc.abstractmethod
    def decode(self, task: DecodeTask, sink: FrameSink) -> None:
        """Decode ``task`` and call ``sink(i, frame)`` once for every wanted frame ``i``.

        Raises:
            CorruptVideoError / UnsupportedCodecError / VideoNotFoundError naming the file.
        """

    def close(self) -> None:
        """Release decoders and file handles."""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()
