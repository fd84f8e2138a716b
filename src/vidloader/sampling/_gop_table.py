"""The sample space cut into GOPs: which samples (frames or clip starts) each GOP holds.

A sample belongs to the GOP of its *first* frame (a clip may run on into the next GOP). The
sample space numbers samples video by video and, inside a video, by start frame, so the
samples of one GOP are a contiguous run of sample ids, and the GOPs of the whole dataset are
described by one sorted array of boundaries: two int64 per GOP, nothing per frame.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..errors import ConfigError
from ._space import SampleSpace


class GopTable:
    """The non-empty GOPs of a sample space, in sample-id order.

    GOP ``j`` holds sample ids ``starts[j] .. starts[j + 1] - 1`` of video ``videos[j]``.
    GOPs that hold no sample (e.g. the tail GOPs of a video too short for one more clip) are
    left out, so a window of ``W`` GOPs always holds ``W`` GOPs' worth of samples.

    Args:
        space (SampleSpace): the samples.
        keyframes (Sequence[np.ndarray]): display indices of every video's keyframes
            (sorted, starting at 0), in index order.
    """

    def __init__(self, space: SampleSpace, keyframes: Sequence[np.ndarray]) -> None:
        if len(keyframes) != space.num_videos:
            raise ValueError(f"{len(keyframes)} keyframe arrays for {space.num_videos} videos")
        self.space = space
        counts = space.counts
        lengths = np.fromiter((len(k) for k in keyframes), np.int64, len(keyframes))
        videos = np.repeat(np.arange(space.num_videos, dtype=np.int64), lengths)
        kf = np.concatenate([np.asarray(k, np.int64) for k in keyframes]) if len(videos) else videos
        # First sample of each GOP, as a sample number inside its video: the first start
        # s = i * step with s >= keyframe, clipped to the video's sample count.
        step = space.shape.step
        local = np.minimum(-(-kf // step), counts[videos])
        first = space.offsets[videos] + local
        last_of_video = np.ones(len(first), bool)
        last_of_video[:-1] = videos[1:] != videos[:-1]
        stop = np.where(last_of_video, space.offsets[videos + 1], np.append(first[1:], 0))
        keep = stop > first
        self.starts = np.append(first[keep], space.size).astype(np.int64)
        self.videos = videos[keep]
        self.keyframes = kf[keep]

    @classmethod
    def from_index(cls, index, space: SampleSpace) -> GopTable:
        """The GOP table of ``index`` (a :class:`~vidloader.index.VideoIndex`) over ``space``.

        Raises:
            ConfigError: ``index`` holds no per-video keyframes (an array stand-in).
        """
        try:
            keyframes = [record.keyframes for record in index]
        except (AttributeError, TypeError):
            raise ConfigError(
                f"GOP-aware sampling needs each video's keyframes, but {type(index).__name__} "
                "has no records with a `keyframes` array; pass a VideoIndex from build_index"
            ) from None
        return cls(space, keyframes)

    @property
    def num_gops(self) -> int:
        """Non-empty GOPs."""
        return len(self.videos)

    @property
    def sizes(self) -> np.ndarray:
        """int64 samples per GOP."""
        return np.diff(self.starts)

    def gop_of(self, sample_ids: np.ndarray) -> np.ndarray:
        """int64 GOP number of each sample id."""
        ids = np.asarray(sample_ids, np.int64)
        return np.searchsorted(self.starts, ids, side="right").astype(np.int64) - 1

    def __repr__(self) -> str:
        return f"GopTable({self.num_gops} GOPs, {self.space.size} samples)"


def sample_ids(space: SampleSpace, videos: np.ndarray, first_frames: np.ndarray) -> np.ndarray:
    """Inverse of :meth:`SampleSpace.locate`: the sample id of each (video, first frame).

    Raises:
        ValueError: a first frame is not a sample start of its video (not a multiple of
            ``step``, or too late for a whole sample).
    """
    videos = np.asarray(videos, np.int64)
    first = np.asarray(first_frames, np.int64)
    local, rest = np.divmod(first, space.shape.step)
    bad = (rest != 0) | (local < 0) | (local >= space.counts[videos])
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"video {int(videos[i])} frame {int(first[i])} is not a sample start of {space!r}"
        )
    return space.offsets[videos] + local
