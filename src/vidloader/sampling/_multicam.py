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
from ._checks import check_bool
from ._clips import Clips
from ._epoch import BLOCK_SAMPLES, BlockCache, SampledEpoch
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
        streams (bool): the separation example's stream order (needs ``shuffle=False``): the
            in-order samples are cut into ``batch_size`` contiguous runs, and batch ``i``
            takes sample ``i`` of each run, so every row of a batch walks one video from
            batch to batch. On CPU workers each row then stays with one worker, which
            decodes its video forward, each frame once (whole batches only: ``drop_last``
            is implied).
        num_samples (int | None): samples (rigs × starts) per epoch over all ranks.
        seed (int): seed of the order and of the per-sample crops and flips.

    Raises:
        ConfigError: no rig, rigs of different camera counts, a negative position,
            ``streams`` with ``shuffle``; at ``plan_epoch``, a position outside the index or
            no rig long enough for a clip.
    """

    def __init__(
        self, rigs: Sequence[Sequence[int]], *, sequence_length: int = 1, stride: int = 1,
        step: int = 1, shuffle: bool = True, replacement: bool = False, streams: bool = False,
        num_samples: int | None = None, seed: int = 0,
    ) -> None:
        super().__init__(sequence_length=sequence_length, stride=stride, step=step,
                         shuffle=shuffle, replacement=replacement, num_samples=num_samples,
                         seed=seed)
        self.rigs = _check_rigs(rigs)
        self.is_clip = self.sequence_length > 1  # single frames have no T axis
        self.streams = check_bool("streams", streams)
        if self.streams and self.shuffle:
            raise ConfigError("MultiCameraClips(streams=True) walks the samples in order, in "
                              "batch_size interleaved runs: pass shuffle=False too")

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

    def num_samples(self, index: VideoIndex) -> int:
        """Samples per epoch over all ranks; with ``streams``, any number (the runs wrap)."""
        if self.streams:
            return self._num_samples or self.sample_space(index).size
        return super().num_samples(index)

    def plan_epoch(
        self, index: VideoIndex, *, epoch: int, batch_size: int, rank: int = 0,
        world_size: int = 1, drop_last: bool = False,
    ) -> MultiCameraEpoch | StreamEpoch:
        """This rank's share of epoch ``epoch``: ``batch_size`` samples, ``batch_size ×
        cameras`` rows per batch (see :meth:`Clips.plan_epoch`); with ``streams``, the
        stream order (:class:`StreamEpoch`)."""
        if self.streams:
            # The runs cut every sample of the space in order (batch p = sample p); num_samples
            # sets the epoch's length, and a run walks on into the next one past its end.
            whole = MultiCameraClips(self.rigs, sequence_length=self.sequence_length,
                                     stride=self.stride, step=self.step, shuffle=False,
                                     seed=self.seed)
            in_order = super(MultiCameraClips, whole).plan_epoch(index, epoch=epoch, batch_size=1)
            length = self.num_samples(index) // (batch_size * world_size)
            return StreamEpoch(MultiCameraEpoch(in_order, self.rigs), groups=batch_size,
                               length=length, rank=rank)
        plan = super().plan_epoch(index, epoch=epoch, batch_size=batch_size, rank=rank,
                                  world_size=world_size, drop_last=drop_last)
        return MultiCameraEpoch(plan, self.rigs)

    def config(self) -> dict:
        # The rigs themselves can be long: a digest is enough to refuse a mismatched resume.
        digest = hashlib.sha256(self.rigs.tobytes() + str(self.rigs.shape).encode()).hexdigest()[:16]
        return {**super().config(), "rigs": digest, **({"streams": True} if self.streams else {})}


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


    def __repr__(self) -> str:
        return f"MultiCameraEpoch({self.samples!r}, {self.rigs.shape[1]} cameras)"


#: Blocks of batches a :class:`StreamEpoch` keeps: a reader up to two blocks ahead of another
#: (stream-GOP units ahead of dispatch, batch size 128 and more) recomputes nothing.
KEPT_BLOCKS = 3

#: Batches a unit of one row spans in the stream order (see :meth:`StreamEpoch.decode_units`).
STREAM_UNIT_BATCHES = 4


class StreamEpoch(EpochPlan):
    """The stream order over the in-order samples of a :class:`MultiCameraEpoch` (one sample
    per batch there): they are cut into ``groups`` contiguous runs, and batch ``i`` holds
    sample ``i`` of each run (this rank's stretch of it), one row per camera. So row ``r``
    walks one video from batch to batch, until its run passes into the next rig: the plan is
    one of streams (``row_affinity``), whose units are one row over
    :data:`STREAM_UNIT_BATCHES` batches (``decode_units``), and a CPU worker given every unit
    of a row decodes its video forward, each frame once, where whole-batch units decoded
    every GOP again from its keyframe for every few frames (W3 small: 1.00 decoded per
    delivered frame against 5.00, 369 frames/s against 75 on 2 cores,
    ``benchmarks/results/cpu/session12-stream``)."""

    row_affinity = True
    #: Batches a unit spans (what the loader's ``lookahead`` becomes), known without
    #: walking every unit of the epoch.
    unit_batches = STREAM_UNIT_BATCHES

    def __init__(self, in_order: MultiCameraEpoch, *, groups: int, length: int, rank: int = 0) -> None:
        self.in_order, self.groups, self.length, self.rank = in_order, groups, length, rank
        self.total = len(in_order)
        self.run = self.total // groups  # the length of each contiguous run
        # NVDEC's stream-GOP units read up to 64 + 8 batches ahead of the batches being
        # dispatched, and with one block kept the two readers made each other recompute
        # theirs at every block boundary (session 22 review).
        self._blocks = BlockCache(KEPT_BLOCKS)

    def __len__(self) -> int:
        return self.length

    def in_order_positions(self, batch_index: int) -> list[int]:
        """The in-order samples batch ``batch_index`` takes, one per run (its definition)."""
        # Rank r walks its own stretch of each run (g = r·length + b), so ranks do not decode
        # each other's GOPs.
        g = self.rank * self.length + batch_index
        return [(k * self.run + g) % self.total for k in range(self.groups)]

    def batch(self, batch_index: int) -> BatchPlan:
        """Batch ``batch_index``: sample ``in_order_positions(batch_index)[k]`` in row group
        ``k``. Computed a block of batches at a time, as :meth:`SampledEpoch.batch` does:
        asking the in-order epoch for each sample apart made it compute a block of
        :data:`~._epoch.BLOCK_SAMPLES` for each of a batch's runs that lay in another block
        than the last (every batch, once the epoch held more than one block: 200 rigs of 48
        frames delivered 212 frames/s on the H200, session 22)."""
        if not 0 <= batch_index < self.length:
            raise IndexError(f"batch {batch_index} of {self.length}")
        return self._blocks.batch(batch_index, per_block=max(1, BLOCK_SAMPLES // self.groups),
                                  length=self.length, compute=self._compute)

    def _compute(self, batches: range) -> list[BatchPlan]:
        """The plans of consecutive ``batches``, their samples located in one pass."""
        g = self.rank * self.length + np.arange(batches.start, batches.stop, dtype=np.int64)
        runs = np.arange(self.groups, dtype=np.int64) * self.run
        local = (g[:, None] + runs[None, :]) % self.total  # [batches, groups], row-major
        samples = self.in_order.samples
        videos, frames, seeds = samples.samples_at(local.ravel())
        rigs = self.in_order.rigs
        cameras = rigs.shape[1]
        plans = []
        for k, b in enumerate(batches):
            rows = slice(k * self.groups, (k + 1) * self.groups)
            plans.append(BatchPlan(
                epoch=samples.epoch, batch_index=b,
                video_indices=rigs[videos[rows]].ravel(),
                frame_indices=np.repeat(frames[rows], cameras, axis=0),
                sample_seeds=np.repeat(seeds[rows], cameras),  # one crop/flip per sample
                is_clip=samples.is_clip))
        return plans

    def decode_units(self, first_batch: int = 0):
        """Units ``[(batch, row, row + 1), …]``: each row over :data:`STREAM_UNIT_BATCHES`
        consecutive batches, block after block from ``first_batch`` on."""
        rows = self.groups * int(self.in_order.rigs.shape[1])
        for b0 in range(first_batch, self.length, STREAM_UNIT_BATCHES):
            block = range(b0, min(b0 + STREAM_UNIT_BATCHES, self.length))
            for r in range(rows):
                yield [(b, r, r + 1) for b in block]


    def __repr__(self) -> str:
        return f"StreamEpoch({self.groups} runs of {self.run} samples, {self.length} batches)"


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
