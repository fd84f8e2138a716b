"""Per-video metadata (:class:`VideoRecord`) and the dataset index (:class:`VideoIndex`).

Frame ``i`` of a video always means the ``i``-th frame in *display* order (ascending pts), for
every backend: ``record.pts[i]`` is its presentation timestamp in ``record.time_base`` units.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Iterator, Sequence
from fractions import Fraction
from functools import cached_property

import numpy as np

from ..errors import FrameIndexError
from . import _codecs


@dataclasses.dataclass(frozen=True, eq=False)
class VideoRecord:
    """Everything vidloader needs to know about one video, found by demuxing (no pixel decode).

    Attributes:
        path (str): absolute path of the file.
        codec (str): FFmpeg codec name of the video stream (``"h264"``, ``"hevc"``, ``"av1"``,
            ``"vp9"`` …), never the decoder library's (``"libdav1d"``).
        width (int), height (int): picture size in pixels as decoded (before rotation).
        pix_fmt (str): decoder pixel format (``"yuv420p"`` …).
        bit_depth (int): bits per luma sample.
        rotation (int): degrees (0, 90, 180, 270) the display matrix asks to rotate by.
        fps (float): average frame rate (frames / duration).
        time_base (Fraction): unit of ``pts``.
        num_frames (int): exact number of frames (counted packets, not the header's guess).
        keyframes (np.ndarray): int64 display indices of keyframes, sorted; ``keyframes[0] == 0``.
        pts (np.ndarray): int64 presentation timestamps of every frame, in display order.
        color_space (str): matrix coefficients (``"bt709"``, ``"bt470bg"``, ``"unknown"`` …).
        color_range (str): ``"tv"`` (limited), ``"pc"`` (full) or ``"unknown"``.
        stream_index (int): index of the video stream in the container.
        size_bytes (int): file size.
        mtime_ns (int): the file's modification time (ns since the epoch) when indexed; ``0``
            if unknown (indexes of format version 3 or older): then only the size is compared.
        profile (str): the codec profile as FFmpeg names it (``"High"``, ``"High 10"``,
            ``"Main 10"``, ``"Rext"``, ``"Profile 0"`` …); ``""`` if unknown.
        chroma_format (str): chroma subsampling, ``"420"``, ``"422"``, ``"444"``, ``"400"``
            (luma only) …; derived from ``pix_fmt`` when not given.
        coded_width (int), coded_height (int): the size the decoder codes pictures at (the
            picture size rounded up to the codec's block grid, e.g. 1920×1088 for 1080p
            H.264); derived when not given. What hardware decoders' size limits apply to.
        warning (str): why the probe doubts the file although it indexed it (its frames
            disagree with the container's stated count or duration, see
            :mod:`vidloader.index._crosscheck`); ``""`` if nothing.

    ``codec``, ``profile``, ``bit_depth``, ``chroma_format`` and the coded size decide whether
    a hardware decoder can take the video (see
    :func:`vidloader.decoding.nvdec.nvdec_decodability`).
    """

    path: str
    codec: str
    width: int
    height: int
    pix_fmt: str
    bit_depth: int
    rotation: int
    fps: float
    time_base: Fraction
    num_frames: int
    keyframes: np.ndarray
    pts: np.ndarray
    color_space: str = "unknown"
    color_range: str = "unknown"
    stream_index: int = 0
    size_bytes: int = 0
    profile: str = ""
    chroma_format: str = ""
    coded_width: int = 0
    coded_height: int = 0
    mtime_ns: int = 0
    warning: str = ""

    def __post_init__(self) -> None:
        if not self.chroma_format:
            object.__setattr__(self, "chroma_format", _codecs.chroma_format(self.pix_fmt))
        if not (self.coded_width and self.coded_height):
            w, h = _codecs.coded_size(self.codec, self.width, self.height)
            object.__setattr__(self, "coded_width", w)
            object.__setattr__(self, "coded_height", h)
        if len(self.pts) != self.num_frames:
            raise ValueError(f"{self.path}: {len(self.pts)} pts for {self.num_frames} frames")
        if self.num_frames and (len(self.keyframes) == 0 or self.keyframes[0] != 0):
            raise ValueError(f"{self.path}: the first frame must be a keyframe")

    @classmethod
    def _unchecked(cls, fields: dict) -> VideoRecord:
        """A record made from a dict of *all* its fields, skipping ``__init__`` checks.

        For :func:`load_index` only, which validates whole columns at once: per-record
        construction and checks would dominate the load time of a 100k-video index.
        """
        record = object.__new__(cls)
        object.__setattr__(record, "__dict__", fields)  # frozen: plain setattr is blocked
        return record

    @property
    def duration_seconds(self) -> float:
        return self.num_frames / self.fps if self.fps else 0.0

    @property
    def gop_lengths(self) -> np.ndarray:
        """Frames in each GOP (keyframe to next keyframe), in order."""
        return np.diff(np.append(self.keyframes, self.num_frames))

    def check_unchanged(self) -> None:
        """Raise unless the file is still the one indexed (same byte size and, when recorded,
        modification time): one ``stat``, done by every decoder when it opens the file.

        Raises:
            VideoNotFoundError: the file is gone.
            StaleIndexError: its size or modification time changed; re-index it.
        """
        from ._stale import check_unchanged

        check_unchanged(self)

    def frames_before(self, seconds: float) -> int:
        """Frames whose timestamp, counted from the first frame's, is below ``seconds``
        (exactly: ``seconds`` as the decimal it prints as, in ``time_base`` units)."""
        pts = np.asarray(self.pts, np.int64)
        if not len(pts):
            return 0
        # pts are integers: pts < limit  <=>  pts < ceil(limit). In floating point, 0.28 s at
        # 1/12800 came out a hair above 3584 and counted the frame at exactly 0.28 s.
        limit = math.ceil(Fraction(repr(float(seconds))) / Fraction(self.time_base))
        return int(np.searchsorted(pts - pts[0], limit, side="left"))

    def keyframe_before(self, frame_index: int | np.ndarray) -> int | np.ndarray:
        """Display index of the last keyframe at or before ``frame_index`` (vectorised)."""
        self.check_frames(frame_index)
        pos = np.searchsorted(self.keyframes, frame_index, side="right") - 1
        return self.keyframes[pos]

    def check_frames(self, frame_index: int | np.ndarray) -> None:
        """Raise :class:`FrameIndexError` if any index is outside ``[0, num_frames)``."""
        idx = np.asarray(frame_index)
        if idx.size and (idx.min() < 0 or idx.max() >= self.num_frames):
            bad = idx[(idx < 0) | (idx >= self.num_frames)].ravel()[0]
            raise FrameIndexError(
                f"{self.path}: frame {int(bad)} is out of range; the video has "
                f"{self.num_frames} frames (valid: 0..{self.num_frames - 1})"
            )

    def __repr__(self) -> str:
        return (
            f"VideoRecord({os.path.basename(self.path)!r}, {self.codec} {self.width}x{self.height} "
            f"{self.pix_fmt}, {self.num_frames} frames @ {self.fps:.3g} fps, "
            f"{len(self.keyframes)} keyframes)"
        )


@dataclasses.dataclass(frozen=True)
class RejectedVideo:
    """A file that could not be indexed, and why."""

    path: str
    reason: str


class VideoIndex(Sequence[VideoRecord]):
    """The indexed dataset: readable videos in a fixed order, plus the files that were rejected.

    Video ``k`` of the index is ``index[k]``; samplers and loaders refer to videos by ``k``.
    Build one with :func:`vidloader.build_index`, persist with :meth:`save` / :meth:`load`.
    """

    def __init__(
        self, records: Sequence[VideoRecord], rejected: Sequence[RejectedVideo] = ()
    ) -> None:
        self._records = list(records)
        self.rejected: list[RejectedVideo] = list(rejected)

    def __len__(self) -> int:
        return len(self._records)

    def __getitem__(self, k):  # type: ignore[override]
        if isinstance(k, slice):
            return VideoIndex(self._records[k])
        return self._records[k]

    def __iter__(self) -> Iterator[VideoRecord]:
        return iter(self._records)

    def frames_before(self, seconds: float) -> np.ndarray:
        """int64 per video: :meth:`VideoRecord.frames_before` (computed once per value)."""
        cache = self.__dict__.setdefault("_frames_before", {})
        if seconds not in cache:
            counts = np.fromiter((r.frames_before(seconds) for r in self._records), np.int64,
                                 len(self._records))
            counts.setflags(write=False)  # shared by every caller
            cache[seconds] = counts
        return cache[seconds]

    @cached_property
    def num_frames(self) -> np.ndarray:
        """int64 frame count of every video, in index order."""
        return np.fromiter((r.num_frames for r in self._records), np.int64, len(self._records))

    @property
    def total_frames(self) -> int:
        return int(self.num_frames.sum())

    @property
    def paths(self) -> list[str]:
        return [r.path for r in self._records]

    @property
    def flagged(self) -> list[VideoRecord]:
        """Indexed videos the probe doubts (a non-empty ``warning``), in index order."""
        return [r for r in self._records if r.warning]

    def __repr__(self) -> str:
        return (
            f"VideoIndex({len(self)} videos, {self.total_frames} frames, "
            f"{len(self.rejected)} rejected)"
        )

    def save(self, path: str | os.PathLike) -> None:
        """Write the index to ``path`` (versioned columnar ``.npz``, no pickle)."""
        from ._store import save_index

        save_index(self, path)

    @classmethod
    def load(cls, path: str | os.PathLike, *, allow_outside_root=False,
             check_mtime: bool = True) -> VideoIndex:
        """Read an index written by :meth:`save`.

        Args:
            path: the index file.
            allow_outside_root (bool | list of paths): video paths outside the index file's
                folder are refused (default ``False``); ``True`` accepts any, a list accepts
                those under the folders it names.
            check_mtime (bool): compare modification times as well as sizes when files are
                opened (default ``True``; ``False`` for a copy that lost its times).

        Raises:
            IndexFormatError: not a vidloader index. PathOutsideRootError: a path escapes.
        """
        from ._store import load_index

        return load_index(path, allow_outside_root=allow_outside_root, check_mtime=check_mtime)

    def to_nvidia_json(self) -> dict[str, dict[str, int]]:
        """The index as NVIDIA's separation-decode example expects: ``{video_dir: {clip_id: frames}}``."""
        from ._nvjson import to_nvidia_json

        return to_nvidia_json(self)

    @classmethod
    def from_nvidia_json(cls, source, *, allow_outside_root=False, **build_kwargs) -> VideoIndex:
        """Build an index from NVIDIA's ``{video_dir: {clip_id: frame_count}}`` JSON (path or
        dict); clips outside the JSON's folder are refused unless ``allow_outside_root``
        (``True`` or a list of folders) allows them."""
        from ._nvjson import from_nvidia_json

        return from_nvidia_json(source, allow_outside_root=allow_outside_root, **build_kwargs)
