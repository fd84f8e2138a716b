"""A multi-camera frame sampler for the ``multicam`` workloads (NVIDIA's separation example).

The library's multi-camera sampler is :class:`vidloader.MultiCameraClips` (each (rig, frame)
once per epoch, outputs with a camera axis). The benchmark keeps this one because it
reproduces the separation example's two orders exactly, written against the public
:class:`vidloader.Sampler` contract: every sample is one (clip, frame) pair
and fills ``cameras`` consecutive rows of the batch, one per camera file of the clip, all at
the same frame index. The loader then decodes those rows like any others (GOP grouping per
file, worker processes, shared-memory slots) and the harness reshapes a batch of
``groups * cameras`` rows to ``groups × cameras``.

Two orders, as in the separation example's samplers:

* ``"stream"`` (``VideoClipSamplerStream``): all (clip, frame) pairs are cut into ``groups``
  contiguous runs; batch ``i`` takes element ``i`` of each run, so consecutive batches walk
  frame by frame through the same clips (past the end of its run, a group walks on into the
  next run, so an epoch may be longer than the dataset).
* ``"random"`` (``VideoClipSamplerRandom``): every sample is an independent uniform draw over
  all (clip, frame) pairs.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from ..errors import ConfigError
from ..sampling import BatchPlan, EpochPlan, Sampler


class MultiCameraFrames(Sampler):
    """Same frame index across the camera files of a clip.

    Args:
        clips (list[list[int]]): for each clip, the index positions of its camera videos
            (all clips have the same number of cameras).
        order ("stream" | "random"): see the module docstring.
        num_samples (int | None): (clip, frame) samples per epoch; default all pairs.
        seed (int): seed of the random order.
    """

    is_clip = False

    def __init__(
        self, clips: list[list[int]], *, order: Literal["stream", "random"] = "random",
        num_samples: int | None = None, seed: int = 0,
    ) -> None:
        if not clips or len({len(c) for c in clips}) != 1:
            raise ConfigError("MultiCameraFrames needs clips with the same number of cameras")
        if order not in ("stream", "random"):
            raise ConfigError(f"order must be 'stream' or 'random', got {order!r}")
        self.clips = [list(map(int, c)) for c in clips]
        self.cameras = len(clips[0])
        self.order, self.seed = order, int(seed)
        self._num_samples = num_samples

    def _pairs(self, index) -> np.ndarray:
        """Frames per clip: the shortest camera's count (cameras may differ by a frame)."""
        return np.array([min(index[v].num_frames for v in clip) for clip in self.clips], np.int64)

    def num_samples(self, index) -> int:
        """Rows per epoch (``cameras`` per (clip, frame) sample)."""
        pairs = int(self._pairs(index).sum())
        return self.cameras * (self._num_samples or pairs)

    def plan_epoch(
        self, index, *, epoch: int, batch_size: int, rank: int = 0, world_size: int = 1,
        drop_last: bool = False,
    ) -> EpochPlan:
        if batch_size % self.cameras:
            raise ConfigError(
                f"batch_size={batch_size} must be a multiple of the {self.cameras} cameras"
            )
        return _MultiCamEpoch(self, self._pairs(index), epoch, batch_size // self.cameras,
                              rank, world_size)

    def config(self) -> dict:
        return {"type": type(self).__name__, "order": self.order, "seed": self.seed,
                "cameras": self.cameras, "num_samples": self._num_samples}


class _MultiCamEpoch(EpochPlan):
    """Full batches only (a short one would break the ``groups × cameras`` reshape)."""

    def __init__(self, sampler: MultiCameraFrames, frames: np.ndarray, epoch: int, groups: int,
                 rank: int, world_size: int) -> None:
        self.s, self.frames, self.epoch, self.groups = sampler, frames, epoch, groups
        self.rank, self.world = rank, world_size
        self.starts = np.concatenate([[0], np.cumsum(frames)])  # pair id → clip by search
        self.total = int(frames.sum())
        self.run = self.total // groups  # stream order: length of each contiguous run
        # Past the end of its run a group walks on into the next one's (and wraps around).
        self.n = (sampler._num_samples or self.total) // (groups * world_size)

    def __len__(self) -> int:
        return self.n

    def batch(self, batch_index: int) -> BatchPlan:
        if not 0 <= batch_index < self.n:
            raise IndexError(f"batch {batch_index} of {self.n}")
        g = batch_index * self.world + self.rank
        if self.s.order == "stream":
            pairs = (np.arange(self.groups, dtype=np.int64) * self.run + g) % self.total
        else:
            rng = np.random.default_rng([self.s.seed, self.epoch, g])
            pairs = rng.integers(0, self.total, self.groups)
        clip = np.searchsorted(self.starts, pairs, side="right") - 1
        frame = pairs - self.starts[clip]
        videos = np.array([self.s.clips[c] for c in clip], np.int64).ravel()
        frames = np.repeat(frame, self.s.cameras)[:, None]
        seeds = np.arange(len(videos), dtype=np.uint64) + np.uint64(g * len(videos))
        return BatchPlan(self.epoch, batch_index, videos, frames, seeds, is_clip=False)
