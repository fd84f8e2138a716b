"""Multi-camera sampling: the same frames (or clip) from every camera of a rig at once.

A *rig* is a list of videos recorded together, one per camera (NVIDIA's separation decoder
example: six cameras of a car). A sample is a (rig, start) pair; it fills one row per camera,
all at the same frame indices, so a model sees every view of one instant. The epoch order is
the machinery of the other samplers over the rigs' samples: a keyed permutation (every
(rig, start) once per epoch), in order, or i.i.d. draws; sharded over ranks the same way.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np

from ..errors import ConfigError
from ..index import VideoIndex
from ._base import BatchPlan, EpochPlan
from ._clips import Clips
from ._epoch import SampledEpoch
from ._space import SampleSpace


class MultiCameraClips(Clips):
    """Clips (or frames) at the same indices from every camera of a rig.

    ``batch_size`` counts samples (rigs); a batch has ``batch_size × cameras`` rows, and the
    loader hands out every tensor with a camera axis: ``frames`` is ``[B, cameras, ...]``,
    ``video_index`` and ``frame_index`` are ``[B, cameras(, T)]``. The cameras of one sample
    share its random crop and flip. A rig holds as many samples as its shortest camera allows
    (cameras may differ by a frame or two).

    Args:
        rigs (sequence of sequences of int): for each rig, the index positions of its camera
            videos, in camera order; every rig has the same number of cameras.
        sequence_length, stride, step: clip shape, as :class:`Clips` (``sequence_length=1``:
            single frames, no ``T`` axis).
        shuffle (bool): a keyed random permutation of all (rig, start) samples each epoch;
            ``False``: in order, rig by rig.
        replacement (bool): i.i.d. uniform draws (needs ``shuffle=True``).
        num_samples (int | None): samples (rigs × starts) per epoch over all ranks.
        seed (int): seed of the order and of the per-sample crops and flips.

    Raises:
        ConfigError: no rig, rigs of different camera counts, a negative position; at
            ``plan_epoch``, a position outside the index or no rig long enough for a clip.
    """

    def __init__(
        self, rigs: Sequence[Sequence[int]], *, sequence_length: int = 1, stride: int = 1,
        step: int = 1, shuffle: bool = True, replacement: bool = False,
        num_samples: int | None = None, seed: int = 0,
    ) -> None:
        super().__init__(sequence_length=sequence_length, stride=stride, step=step,
                         shuffle=shuffle, replacement=replacement, num_samples=num_samples,
                         seed=seed)
        self.rigs = _check_rigs(rigs)
        self.is_clip = self.sequence_length > 1  # single frames have no T axis

    @property
    def cameras(self) -> int:
        """Cameras per rig."""
        return int(self.rigs.shape[1])

    @property
    def rows_per_sample(self) -> int:
        """One row per camera (see :attr:`Sampler.rows_per_sample`)."""
        return self.cameras

    def sample_space(self, index: VideoIndex) -> SampleSpace:
        """The (rig, start) samples: each rig as long as its shortest camera."""
        if int(self.rigs.max()) >= len(index):
            raise ConfigError(
                f"{self!r}: a rig names video {int(self.rigs.max())}, but the index has "
                f"{len(index)} videos; rigs hold positions in the index"
            )
        space = SampleSpace(np.asarray(index.num_frames)[self.rigs].min(axis=1), self._clip_shape())
        space.check_not_empty(repr(self))
        return space

    def plan_epoch(
        self, index: VideoIndex, *, epoch: int, batch_size: int, rank: int = 0,
        world_size: int = 1, drop_last: bool = False,
    ) -> MultiCameraEpoch:
        """This rank's share of epoch ``epoch``: ``batch_size`` samples, ``batch_size ×
        cameras`` rows per batch (see :meth:`Clips.plan_epoch`)."""
        plan = super().plan_epoch(index, epoch=epoch, batch_size=batch_size, rank=rank,
                                  world_size=world_size, drop_last=drop_last)
        return MultiCameraEpoch(plan, self.rigs)

    def config(self) -> dict:
        # The rigs themselves can be long: a digest is enough to refuse a mismatched resume.
        digest = hashlib.sha256(self.rigs.tobytes() + str(self.rigs.shape).encode()).hexdigest()[:16]
        return {**super().config(), "rigs": digest}


class MultiCameraEpoch(EpochPlan):
    """A :class:`SampledEpoch` over rigs, each sample expanded to one row per camera."""

    def __init__(self, samples: SampledEpoch, rigs: np.ndarray) -> None:
        self.samples, self.rigs = samples, rigs

    def __len__(self) -> int:
        return len(self.samples)

    def batch(self, batch_index: int) -> BatchPlan:
        bp = self.samples.batch(batch_index)
        cameras = self.rigs.shape[1]
        return BatchPlan(
            epoch=bp.epoch, batch_index=bp.batch_index,
            video_indices=self.rigs[bp.video_indices].ravel(),
            frame_indices=np.repeat(bp.frame_indices, cameras, axis=0),
            sample_seeds=np.repeat(bp.sample_seeds, cameras),  # one crop/flip per sample
            is_clip=bp.is_clip,
        )

    def __iter__(self):
        return (self.batch(b) for b in range(len(self)))

    def __repr__(self) -> str:
        return f"MultiCameraEpoch({self.samples!r}, {self.rigs.shape[1]} cameras)"


def _check_rigs(rigs) -> np.ndarray:
    try:
        array = np.asarray([[int(v) for v in rig] for rig in rigs], dtype=np.int64)
    except (TypeError, ValueError):
        raise ConfigError(
            "rigs must be a list of rigs, each a list of index positions of the same length "
            "(one per camera)"
        ) from None
    if array.ndim != 2 or array.size == 0:
        raise ConfigError(f"rigs need at least one rig of at least one camera, got shape {array.shape}")
    if int(array.min()) < 0:
        raise ConfigError(f"rigs hold index positions (>= 0), got {int(array.min())}")
    return array
