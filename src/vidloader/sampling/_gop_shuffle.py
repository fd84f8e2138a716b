"""``GopShuffle``: shuffle GOPs, then shuffle the frames of a window of ``W`` GOPs at a time.

Exact uniform sampling (:class:`RandomFrames`) pays, for nearly every frame, a seek and a
decode from the keyframe: about ``G / 2`` decoded frames per delivered frame with GOPs of
``G`` frames. Sequential reading decodes each frame once but puts whole GOPs, and whole
videos, into one batch. ``GopShuffle`` sits in between, and keeps what makes SGD unbiased:
every sample exactly once per epoch.
"""

from __future__ import annotations

import contextlib
import weakref

from ..errors import ConfigError
from ..index import VideoIndex
from ._base import Sampler
from ._checks import check_int, check_optional_int, check_plan_args
from ._gop_epoch import GopShuffleEpoch
from ._gop_table import GopTable
from ._space import ClipShape, SampleSpace


class GopShuffle(Sampler):
    r"""GOP-local shuffling: decode each GOP once per epoch, sequentially, at near-random order.

    Each epoch:

    1. the dataset's GOPs (keyframe to keyframe, from the index) are put in a keyed random
       order (key ``(seed, epoch)``): the *GOP stream*;
    2. the stream is cut into *blocks* of ``W = window_gops`` consecutive GOPs;
    3. the samples (frames, or clip starts) of each block are put in a keyed random order
       (key ``(seed, epoch, block)``), and the blocks are laid end to end;
    4. the result is cut into batches of ``B``; a batch may straddle two blocks.

    A clip belongs to the GOP of its first frame and may run on into the next GOP.

    **Unbiased.** The epoch is a permutation of all ``N`` samples, so every sample is seen
    exactly once per epoch and the epoch-average gradient is the full-data gradient. Over the
    two random orders each batch holds a given sample with probability ``B / N``, as uniform
    sampling does, so :math:`\mathbb{E}[\nabla_{\text{batch}}] = \nabla_{\text{full}}`
    at every step; exactly so when GOPs hold equal numbers of samples, within a relative
    :math:`|g - \bar G| / (W \bar G)` for a sample of a GOP of ``g`` samples otherwise.

    **The cost is variance, not bias.** Samples of one GOP come together: a batch drawn from
    a block of ``M = W G`` samples holds, per sample, :math:`\bar m_{gop} = 1 + (B-1)
    \frac{G-1}{WG-1}` samples of its own GOP on average (a few percent less when batches
    straddle blocks), against :math:`1 + (B-1)\frac{G-1}{N-1}` for uniform sampling. With
    intra-GOP correlation :math:`\rho` the batch mean's variance grows by the design effect
    :math:`\text{deff} = 1 + (\bar m - 1)\rho`: the batch is worth ``B / deff`` independent
    samples. With the default ``W = B``, :math:`\bar m_{gop} < 2` and deff :math:`< 1 + \rho`
    for any GOP length. ``W`` at least the number of GOPs is one block: exact uniform
    shuffling. Measure it with :func:`vidloader.sampling.sampling_report`; ``docs/sampling.md``
    has the derivation.

    **Speed.** A batch touches at most ``W`` GOPs per block it draws from, and a block's
    batches are consecutive. A worker that takes a whole block (``plan.decode_units()``, or
    a lookahead of ``plan.preferred_lookahead`` batches) enters each GOP once and decodes it
    forward, so decoding costs about one decoded frame per delivered frame, like sequential
    reading. The price is memory: a block's samples (``W * G``) are in flight at once.

    **Distributed.** Rank ``r`` of ``R`` takes the contiguous run ``[r*n, (r+1)*n)`` of the
    epoch order (``n`` as for the other samplers: ``ceil(N / R)`` padded by wrapping to the
    start of the epoch, or ``floor(N / R)`` with ``drop_last``), so each rank decodes its own
    blocks and no GOP is decoded by two ranks except at the run boundaries.

    Batches hold ``frame_indices`` of shape ``[B, sequence_length]``; ``is_clip`` is true
    when ``sequence_length > 1``.

    Args:
        window_gops (int | None): ``W``, GOPs per block. ``None`` (default): the batch size,
            which keeps :math:`\bar m_{gop} - 1 \approx (B - 1) / W` below 1.
        sequence_length (int): frames per sample (1: single frames).
        stride (int): distance in frames between consecutive frames of a clip.
        step (int): distance in frames between consecutive clip starts in a video.
        seed (int): seed of both orders and of the per-sample seeds.

    Raises:
        ConfigError: a bad option; at ``plan_epoch``, an index without keyframes or samples.
    """

    def __init__(
        self, *, window_gops: int | None = None, sequence_length: int = 1, stride: int = 1,
        step: int = 1, seed: int = 0,
    ) -> None:
        self.window_gops = check_optional_int("window_gops", window_gops, minimum=1)
        self.sequence_length = check_int("sequence_length", sequence_length, minimum=1)
        self.stride = check_int("stride", stride, minimum=1)
        self.step = check_int("step", step, minimum=1)
        self.seed = check_int("seed", seed)
        self._table_cache: tuple[weakref.ref, GopTable] | None = None

    @property
    def is_clip(self) -> bool:  # type: ignore[override]
        return self.sequence_length > 1

    def _clip_shape(self) -> ClipShape:
        return ClipShape(self.sequence_length, self.stride, self.step)

    def window_for(self, batch_size: int) -> int:
        """``W`` used with batches of ``batch_size``."""
        return self.window_gops if self.window_gops is not None else batch_size

    def sample_space(self, index: VideoIndex) -> SampleSpace:
        """The samples this sampler draws from ``index``; ConfigError if there are none."""
        space = SampleSpace(index.num_frames, self._clip_shape())
        space.check_not_empty(repr(self))
        return space

    def gop_table(self, index: VideoIndex) -> GopTable:
        """The samples of ``index`` grouped by GOP (cached for the last index seen)."""
        cached = self._table_cache
        if cached is not None and cached[0]() is index:
            return cached[1]
        table = GopTable.from_index(index, self.sample_space(index))
        # An index type without weak references is simply not cached.
        with contextlib.suppress(TypeError):
            self._table_cache = (weakref.ref(index), table)
        return table

    def num_samples(self, index: VideoIndex) -> int:
        """Samples in one epoch over all ranks together: every frame or clip start, once."""
        return self.sample_space(index).size

    def plan_epoch(
        self, index: VideoIndex, *, epoch: int, batch_size: int, rank: int = 0,
        world_size: int = 1, drop_last: bool = False,
    ) -> GopShuffleEpoch:
        """This rank's share of epoch ``epoch`` as a random-access sequence of batch plans.

        Raises:
            ConfigError: a bad argument, an index with no sample or no keyframes, or no batch
                for this rank.
        """
        epoch, batch_size, rank, world_size, drop_last = check_plan_args(
            epoch, batch_size, rank, world_size, drop_last
        )
        plan = GopShuffleEpoch(
            table=self.gop_table(index), window=self.window_for(batch_size), seed=self.seed,
            epoch=epoch, batch_size=batch_size, rank=rank, world_size=world_size,
            drop_last=drop_last, is_clip=self.is_clip,
        )
        if len(plan) == 0:
            raise ConfigError(
                f"{self!r}: batch_size={batch_size} with drop_last=True leaves rank {rank} of "
                f"{world_size} no batch (the epoch has {plan.epoch_samples} samples, "
                f"{plan.num_samples} per rank); lower batch_size or pass drop_last=False"
            )
        return plan

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_table_cache"] = None  # a weak reference does not pickle
        return state

    def __repr__(self) -> str:
        options = {k: v for k, v in self.config().items() if k != "type"}
        return f"GopShuffle({', '.join(f'{k}={v!r}' for k, v in options.items())})"
