"""The sample space of a sampler over an index: how many samples each video holds, and which
video and frames sample ``g`` is.

Clips and single frames are one abstraction: a single frame is a clip of length 1, so
``RandomFrames`` and ``Clips(sequence_length=1)`` enumerate the same space the same way.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..errors import ConfigError


@dataclasses.dataclass(frozen=True)
class ClipShape:
    """Where a sample's frames lie (NVVL / DALI semantics).

    A sample starting at frame ``s`` covers ``s, s + stride, ..., s + stride * (length - 1)``;
    every ``s`` with ``s % step == 0`` whose last frame is inside the video is a sample, so no
    sample crosses the end of a video.

    Attributes:
        length (int): frames per sample (``1`` for single frames).
        stride (int): distance between consecutive frames of a sample.
        step (int): distance between consecutive sample starts in a video.
    """

    length: int = 1
    stride: int = 1
    step: int = 1

    @property
    def span(self) -> int:
        """Frames from a sample's first to its last frame, both included."""
        return self.stride * (self.length - 1) + 1

    def counts(self, num_frames: np.ndarray) -> np.ndarray:
        """int64 number of samples in videos of ``num_frames`` frames (0 where too short)."""
        room = np.asarray(num_frames, dtype=np.int64) - self.span
        return np.where(room >= 0, room // self.step + 1, 0)


class SampleSpace:
    """All samples of one index under one :class:`ClipShape`, numbered video by video.

    Sample ``g`` is sample ``g - offsets[v]`` of video ``v``, where ``offsets`` are the
    cumulative per-video counts; finding ``v`` is a binary search, so locating a batch costs
    O(B log V) and the space itself holds two int64 per video, nothing per frame.

    Args:
        num_frames (np.ndarray): frame count of every video, in index order.
        shape (ClipShape): where a sample's frames lie.
    """

    def __init__(self, num_frames: np.ndarray, shape: ClipShape) -> None:
        num_frames = np.asarray(num_frames, dtype=np.int64)
        self.shape = shape
        self.num_videos = len(num_frames)
        self.offsets = np.zeros(self.num_videos + 1, dtype=np.int64)
        counts = shape.counts(num_frames)
        np.cumsum(counts, out=self.offsets[1:])
        self._longest = int(num_frames.max()) if self.num_videos else 0
        # Samples per video when every video holds the same number (an image dataset: one
        # each), else 0: then a division finds a sample's video, not a binary search.
        uniform = self.num_videos > 0 and counts[0] > 0 and bool((counts == counts[0]).all())
        self._uniform_count = int(counts[0]) if uniform else 0

    @property
    def size(self) -> int:
        """Samples in the space."""
        return int(self.offsets[-1])

    @property
    def counts(self) -> np.ndarray:
        """int64 samples per video."""
        return np.diff(self.offsets)

    def locate(self, sample_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Video and frames of each sample.

        Args:
            sample_ids (np.ndarray): int64 ``[B]`` sample numbers in ``[0, size)``.

        Returns:
            tuple[np.ndarray, np.ndarray]: int64 ``[B]`` video indices and int64
            ``[B, length]`` frame numbers.
        """
        ids = np.asarray(sample_ids, dtype=np.int64)
        if self._uniform_count:
            # offsets[v] == v * count: the same answer as the search below. Worth it: numpy's
            # branchy search costs ~110 ns a random id over 50,000 videos, the division ~1.
            videos, within = np.divmod(ids, self._uniform_count)
            starts = within * self.shape.step
        else:
            # side="right" skips videos with no samples: they share their offset with the next.
            videos = np.searchsorted(self.offsets, ids, side="right").astype(np.int64) - 1
            starts = (ids - self.offsets[videos]) * self.shape.step
        frames = starts[:, None] + self.shape.stride * np.arange(self.shape.length, dtype=np.int64)
        return videos, frames

    def check_not_empty(self, owner: str) -> None:
        """Raise :class:`ConfigError` (naming the requirement) if the space has no sample."""
        if self.size:
            return
        if self.num_videos == 0:
            raise ConfigError(f"{owner}: the index has no videos; index some videos first")
        shape = self.shape
        if shape.span == 1:
            raise ConfigError(f"{owner}: the index's {self.num_videos} videos have no frames")
        raise ConfigError(
            f"{owner}: no video is long enough for one clip: a clip of sequence_length="
            f"{shape.length} with stride={shape.stride} needs stride * (sequence_length - 1) + 1"
            f" = {shape.span} frames, and the longest of the {self.num_videos} videos has "
            f"{self._longest}; lower sequence_length or stride, or index longer videos"
        )

    def __repr__(self) -> str:
        return f"SampleSpace({self.size} samples in {self.num_videos} videos, {self.shape})"
