"""The samplers of the ``multicam`` workloads (NVIDIA's separation example), on the library's
:class:`vidloader.MultiCameraClips`.

A sample is one (clip, frame) pair and fills one row per camera file of the clip, all at the
same frame index; the loader decodes those rows like any others and hands out batches with a
camera axis. Two orders, as in the separation example's samplers:

* ``"random"`` (``VideoClipSamplerRandom``): every sample an independent uniform draw over
  all (clip, frame) pairs: ``MultiCameraClips(replacement=True)`` as it is.
* ``"stream"`` (``VideoClipSamplerStream``): the pairs, in order, are cut into ``groups``
  contiguous runs (one per sample of a batch); batch ``i`` takes element ``i`` of each run, so
  consecutive batches walk frame by frame through the same clips (past the end of its run, a
  group walks on into the next run). ``MultiCameraClips`` has no such order, so
  :class:`StreamOrder` regroups its in-order samples; which rows a sample fills stays the
  library's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np

from ..errors import ConfigError
from ..index import VideoIndex
from ..sampling import BatchPlan, EpochPlan, MultiCameraClips, MultiCameraEpoch, Sampler


def multicam_sampler(
    rigs: Sequence[Sequence[int]], *, order: Literal["stream", "random"] = "random",
    num_samples: int | None = None, seed: int = 0,
) -> Sampler:
    """Same frame index across the camera files of a clip, in the separation example's order.

    Args:
        rigs (sequence of sequences of int): for each clip, the index positions of its camera
            videos (all clips have the same number of cameras).
        order ("stream" | "random"): see the module docstring.
        num_samples (int | None): (clip, frame) samples per epoch; default all pairs.
        seed (int): seed of the random order.

    Raises:
        ConfigError: an unknown order, or rigs that :class:`MultiCameraClips` refuses.
    """
    if order == "random":
        return MultiCameraClips(rigs, replacement=True, num_samples=num_samples, seed=seed)
    if order == "stream":
        return StreamOrder(MultiCameraClips(rigs, shuffle=False, seed=seed), num_samples=num_samples)
    raise ConfigError(f"order must be 'stream' or 'random', got {order!r}")


class StreamOrder(Sampler):
    """The in-order samples of a :class:`MultiCameraClips` (``shuffle=False``), regrouped in
    the separation example's stream order; ``batch_size`` counts samples, as for the sampler.

    Args:
        sampler (MultiCameraClips): the rigs; its sample ``p`` is pair ``p`` of the order.
        num_samples (int | None): samples per epoch; default all pairs.
    """

    is_clip = False

    def __init__(self, sampler: MultiCameraClips, *, num_samples: int | None = None) -> None:
        self.sampler = sampler
        self.rows_per_sample = sampler.rows_per_sample
        self._num_samples = num_samples

    def num_samples(self, index: VideoIndex) -> int:
        """Samples per epoch."""
        return self._num_samples or self.sampler.num_samples(index)

    def plan_epoch(
        self, index: VideoIndex, *, epoch: int, batch_size: int, rank: int = 0,
        world_size: int = 1, drop_last: bool = False,
    ) -> EpochPlan:
        """Full batches only (``drop_last`` is implied: a short batch breaks the runs)."""
        in_order = self.sampler.plan_epoch(index, epoch=epoch, batch_size=1)  # batch p = pair p
        length = self.num_samples(index) // (batch_size * world_size)
        return _StreamEpoch(in_order, groups=batch_size, length=length, rank=rank,
                            world_size=world_size)

    def config(self) -> dict:
        return {"type": type(self).__name__, "sampler": self.sampler.config(),
                "num_samples": self._num_samples}


#: Batches a unit of one row spans in the stream order (see :meth:`_StreamEpoch.decode_units`).
STREAM_UNIT_BATCHES = 4


class _StreamEpoch(EpochPlan):
    """Batch ``i`` holds element ``i`` of each group's run, one row per camera: row ``r``
    walks one video frame by frame from batch to batch (until its run passes into the next
    rig). So the plan is one of streams (``row_affinity``): its units are one row over
    :data:`STREAM_UNIT_BATCHES` batches, and a CPU worker given every unit of a row decodes
    its video forward, each frame once, instead of from the keyframe for every few frames."""

    row_affinity = True
    #: Batches a unit spans (what the loader's ``lookahead`` becomes), known without
    #: walking every unit of the epoch.
    unit_batches = STREAM_UNIT_BATCHES

    def __init__(self, in_order: MultiCameraEpoch, *, groups: int, length: int, rank: int,
                 world_size: int) -> None:
        self.in_order, self.groups, self.length = in_order, groups, length
        self.rank, self.world = rank, world_size
        self.total = len(in_order)
        self.run = self.total // groups  # the length of each contiguous run

    def decode_units(self, first_batch: int = 0):
        """Units ``[(batch, row, row + 1), …]``: each row over :data:`STREAM_UNIT_BATCHES`
        consecutive batches, block after block from ``first_batch`` on."""
        rows = self.groups * int(self.in_order.rigs.shape[1])
        for b0 in range(first_batch, self.length, STREAM_UNIT_BATCHES):
            block = range(b0, min(b0 + STREAM_UNIT_BATCHES, self.length))
            for r in range(rows):
                yield [(b, r, r + 1) for b in block]

    def __len__(self) -> int:
        return self.length

    def batch(self, batch_index: int) -> BatchPlan:
        if not 0 <= batch_index < self.length:
            raise IndexError(f"batch {batch_index} of {self.length}")
        # Rank r walks its own stretch of each run (interleaved, g = b·W + r, each rank
        # decoded the GOPs of the frames the other ranks delivered).
        g = self.rank * self.length + batch_index
        parts = [self.in_order.batch((k * self.run + g) % self.total) for k in range(self.groups)]
        return BatchPlan(
            epoch=parts[0].epoch, batch_index=batch_index,
            video_indices=np.concatenate([p.video_indices for p in parts]),
            frame_indices=np.concatenate([p.frame_indices for p in parts]),
            sample_seeds=np.concatenate([p.sample_seeds for p in parts]), is_clip=False,
        )
