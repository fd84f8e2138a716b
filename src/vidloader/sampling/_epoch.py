"""The machinery every built-in sampler shares: an epoch order over a sample space, sharded
over ranks and cut into batches, each batch computed on its own from its number.

Three layers, each a pure function of integers:

1. epoch position ``p`` → sample id: identity (sequential), a keyed permutation of the space
   (shuffle, keyed by ``(seed, epoch)``), or an i.i.d. uniform draw number ``p`` (replacement);
2. sample id → video and frames: :class:`SampleSpace`;
3. (rank, batch, slot) → epoch position: :mod:`._distributed` (interleaved ranks; contiguous
   blocks for a sequential order, so no two ranks decode the same GOPs).

Nothing depends on the batch size, the rank or the number of workers except which positions
a batch holds, so the global stream is the same however it is cut up.
"""

from __future__ import annotations

import abc
from typing import Literal

import numpy as np

from ..errors import ConfigError
from ..index import VideoIndex
from ._base import BatchPlan, EpochPlan, Sampler
from ._checks import check_int, check_optional_int, check_plan_args
from ._distributed import local_batch_positions, num_batches, shard_length, shard_positions
from ._permutation import KeyedPermutation, counter_stream, derive_seed, uniform_below
from ._space import ClipShape, SampleSpace

Mode = Literal["sequential", "shuffle", "replacement"]

# Purpose tags for derive_seed: each stream of an epoch gets its own key.
_SHUFFLE_TAG = 1
_DRAW_TAG = 2
_SAMPLE_SEED_TAG = 3
#: Samples an epoch plan computes at once (see :meth:`SampledEpoch.batch`).
BLOCK_SAMPLES = 8192


class BlockCache:
    """Plans of blocks of consecutive batches, computed a block at a time and kept for the
    ``kept`` blocks used last (most recent first). Aligned blocks of ``per_block`` batches
    serve any access order (a resume, a backwards walk, a reader ahead of another) with one
    block computed per block entered while it is kept. Thread-safe for readers: the kept
    blocks are one tuple, read once and replaced whole (two threads may compute a block
    twice, never see a wrong one)."""

    def __init__(self, kept: int = 1) -> None:
        self.kept = kept
        self._blocks: tuple[tuple[int, list[BatchPlan]], ...] = ()

    @property
    def last(self) -> tuple[int, list[BatchPlan]] | None:
        """``(first batch, its plans)`` of the block used last, or ``None``."""
        blocks = self._blocks
        return blocks[0] if blocks else None

    def batch(self, batch_index: int, *, per_block: int, length: int, compute) -> BatchPlan:
        """The plan of ``batch_index`` of ``length`` batches; ``compute(range)`` gives the
        plans of a range of consecutive batches."""
        first = batch_index - batch_index % per_block
        blocks = self._blocks  # one read: another thread may replace it meanwhile
        for k, block in enumerate(blocks):
            if block[0] == first:
                if k:  # the least recently used block goes last
                    self._blocks = (block, *blocks[:k], *blocks[k + 1:])
                return block[1][batch_index - first]
        plans = compute(range(first, min(first + per_block, length)))
        self._blocks = ((first, plans), *blocks[:self.kept - 1])
        return plans[batch_index - first]


class EpochOrder:
    """The global order of one epoch: epoch position ``p`` → sample id.

    Args:
        space_size (int): samples in the sample space.
        length (int): positions in the epoch (``<= space_size`` unless ``mode="replacement"``).
        mode (str): ``"sequential"`` (position = sample id), ``"shuffle"`` (a keyed
            permutation, truncated to ``length``) or ``"replacement"`` (i.i.d. uniform draws).
        seed (int), epoch (int): what the order is keyed on.
    """

    def __init__(self, space_size: int, length: int, *, mode: Mode, seed: int, epoch: int) -> None:
        self.space_size = space_size
        self.length = length
        self.mode = mode
        self._draw_key = derive_seed(seed, epoch, _DRAW_TAG)
        self._permutation = (
            KeyedPermutation(space_size, derive_seed(seed, epoch, _SHUFFLE_TAG))
            if mode == "shuffle" else None
        )

    def __call__(self, positions: np.ndarray) -> np.ndarray:
        """int64 sample ids at epoch ``positions``."""
        if self.mode == "sequential":
            return np.asarray(positions, dtype=np.int64)
        if self._permutation is not None:
            return self._permutation(positions)
        return uniform_below(self._draw_key, positions, self.space_size)


class SampledEpoch(EpochPlan):
    """One rank's share of one epoch, as ``len(self)`` batches computed on demand.

    Holds the sample space (two int64 per video) and a few keys; :meth:`batch` costs
    O(batch_size) work and memory (plus a binary search over videos).

    Attributes:
        epoch (int), rank (int), world_size (int), batch_size (int), drop_last (bool): as
            passed to ``plan_epoch``.
        epoch_samples (int): samples in the epoch over all ranks.
        num_samples (int): samples this rank delivers (padding included).
    """

    def __init__(
        self, *, space: SampleSpace, order: EpochOrder, seed: int, epoch: int, batch_size: int,
        rank: int, world_size: int, drop_last: bool, is_clip: bool,
    ) -> None:
        self.epoch, self.batch_size, self.drop_last = epoch, batch_size, drop_last
        self.rank, self.world_size = rank, world_size
        self.epoch_samples = order.length
        self.num_samples = shard_length(order.length, world_size, drop_last)
        self._space, self._order, self._is_clip = space, order, is_clip
        self._seed_key = derive_seed(seed, epoch, _SAMPLE_SEED_TAG)
        self._num_batches = num_batches(self.num_samples, batch_size, drop_last)
        self._blocks = BlockCache()

    def __len__(self) -> int:
        return self._num_batches

    def positions(self, batch_index: int) -> np.ndarray:
        """int64 global epoch positions of the samples of batch ``batch_index``."""
        local = local_batch_positions(
            batch_index, self._num_batches, self.batch_size, self.num_samples
        )
        return self._shard(local)

    def _shard(self, local: np.ndarray) -> np.ndarray:
        """Global epoch positions of this rank's local positions ``local``."""
        return shard_positions(
            local, total=self.epoch_samples, rank=self.rank, world_size=self.world_size,
            contiguous=self._order.mode == "sequential", length=self.num_samples,
        )

    def batch(self, batch_index: int) -> BatchPlan:
        """The plan of batch ``batch_index`` (``0 <= batch_index < len(self)``).

        Batches are computed a block at a time (:data:`BLOCK_SAMPLES` samples, aligned) and
        only the last block is kept: every step is a numpy call whose fixed cost dwarfs its
        per-sample cost at a batch's size (~0.5 ms a batch of 256 on a slow core, most of an
        in-memory GPU epoch), and every step is element-wise, so a block gives each batch
        exactly what computing it alone gives. Aligned blocks serve any access order (a
        resume, a backwards walk) with at most one block computed per block entered.
        """
        if not 0 <= batch_index < self._num_batches:
            self.positions(batch_index)  # raises the IndexError naming the range
        return self._blocks.batch(batch_index, per_block=max(1, BLOCK_SAMPLES // self.batch_size),
                                  length=self._num_batches, compute=self._compute)

    @property
    def _block(self) -> tuple[int, list[BatchPlan]] | None:
        """``(first batch, its plans)`` of the block computed or used last."""
        return self._blocks.last

    def samples_at(self, local: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(video_indices, frame_indices, sample_seeds)`` of this rank's samples at local
        positions ``local`` (any order, repeats allowed), in one pass: what :meth:`batch`
        gives those samples, as every step is element-wise."""
        positions = self._shard(np.asarray(local, dtype=np.int64))
        videos, frames = self._space.locate(self._order(positions))
        # Keyed on the global position: the same on resume, whatever the rank or batching.
        return videos, frames, counter_stream(self._seed_key, positions)

    @property
    def is_clip(self) -> bool:
        """Whether this epoch's samples are clips (outputs keep the ``T`` axis)."""
        return self._is_clip

    def _compute(self, batches: range) -> list[BatchPlan]:
        """The plans of consecutive ``batches``, in one pass over their samples."""
        # The batches' local positions are one run: batch b holds b·B .. min((b+1)·B, n) - 1.
        stop = min(batches.stop * self.batch_size, self.num_samples)
        videos, frames, seeds = self.samples_at(
            np.arange(batches.start * self.batch_size, stop, dtype=np.int64))
        plans = []
        for b in batches:
            start = (b - batches.start) * self.batch_size
            rows = slice(start, start + self.batch_size)  # the last batch's may be short
            plans.append(BatchPlan(epoch=self.epoch, batch_index=b, video_indices=videos[rows],
                                   frame_indices=frames[rows], sample_seeds=seeds[rows],
                                   is_clip=self._is_clip))
        return plans


    def __repr__(self) -> str:
        return (
            f"SampledEpoch(epoch={self.epoch}, rank={self.rank}/{self.world_size}, "
            f"{self._num_batches} batches of {self.batch_size}, {self.num_samples} samples of "
            f"{self.epoch_samples})"
        )


class SpaceSampler(Sampler):
    """Base of the built-in samplers: a sample space, an epoch order and sharding.

    Uses only ``index.num_frames`` (and ``len(index)``), so any object with an int64
    ``num_frames`` array can stand in for a :class:`VideoIndex` (handy for huge synthetic
    indexes); ``Clips(first_seconds=...)`` also reads the records' timestamps. Subclasses say where a sample's frames lie (:meth:`_clip_shape`) and in which
    order samples come (:meth:`_mode`).

    Args:
        num_samples (int | None): samples per epoch over all ranks; ``None``: the whole space.
        seed (int): seed of the order and of ``sample_seeds``.
    """

    def __init__(self, *, num_samples: int | None, seed: int) -> None:
        self._num_samples = check_optional_int("num_samples", num_samples, minimum=1)
        self.seed = check_int("seed", seed)

    def _clip_shape(self) -> ClipShape:
        return ClipShape()

    @abc.abstractmethod
    def _mode(self) -> Mode:
        """How the epoch orders the sample space (shuffled, sequential, with replacement)."""

    @property
    def epoch_order(self) -> Mode:
        return self._mode()

    def _frames(self, index: VideoIndex) -> np.ndarray:
        """Frames of each video that samples may use: all of them (a subclass may take fewer,
        e.g. :class:`~vidloader.Clips` with ``first_seconds``)."""
        return index.num_frames

    def sample_space(self, index: VideoIndex) -> SampleSpace:
        """The samples this sampler draws from ``index``; ConfigError if there are none."""
        space = SampleSpace(self._frames(index), self._clip_shape())
        space.check_not_empty(repr(self))
        return space

    def num_samples(self, index: VideoIndex) -> int:
        """Samples in one epoch over all ranks together (before padding or drop_last)."""
        return self._epoch_length(self.sample_space(index))

    def _epoch_length(self, space: SampleSpace) -> int:
        wanted = self._num_samples
        if wanted is None:
            return space.size
        if self._mode() != "replacement" and wanted > space.size:
            raise ConfigError(
                f"{self!r}: num_samples={wanted}, but the index holds only {space.size} "
                f"samples and an epoch without replacement takes each at most once; lower "
                f"num_samples or pass replacement=True"
            )
        return wanted

    def plan_epoch(
        self, index: VideoIndex, *, epoch: int, batch_size: int, rank: int = 0,
        world_size: int = 1, drop_last: bool = False,
    ) -> SampledEpoch:
        """This rank's share of epoch ``epoch`` as a random-access sequence of batch plans.

        Rank ``rank`` takes epoch positions ``rank, rank + world_size, ...`` (with a
        sequential order, the ``rank``-th contiguous block of the epoch instead). With
        ``drop_last=False`` each rank gets ``ceil(N / world_size)`` samples (short ranks wrap
        to the start of the epoch order) and the last batch may be short; with
        ``drop_last=True`` each gets ``floor(N / world_size)`` and only full batches.

        Raises:
            ConfigError: a bad argument, an index with no sample, or no batch for this rank.
        """
        epoch, batch_size, rank, world_size, drop_last = check_plan_args(
            epoch, batch_size, rank, world_size, drop_last
        )
        space = self.sample_space(index)
        order = EpochOrder(
            space.size, self._epoch_length(space), mode=self._mode(), seed=self.seed, epoch=epoch
        )
        plan = SampledEpoch(
            space=space, order=order, seed=self.seed, epoch=epoch, batch_size=batch_size,
            rank=rank, world_size=world_size, drop_last=drop_last, is_clip=self.is_clip,
        )
        if len(plan) == 0:
            raise ConfigError(
                f"{self!r}: batch_size={batch_size} with drop_last=True leaves rank {rank} of "
                f"{world_size} no batch (the epoch has {order.length} samples, "
                f"{plan.num_samples} per rank); lower batch_size or pass drop_last=False"
            )
        return plan

    def config(self) -> dict:
        """A JSON-able description (stored in ``state_dict`` to refuse a mismatched resume)."""
        return {**super().config(), "num_samples": self._num_samples}

    def __repr__(self) -> str:
        options = {k: v for k, v in self.config().items() if k != "type"}
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in options.items())})"
