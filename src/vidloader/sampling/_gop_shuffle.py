"""``GopShuffle``: shuffle GOPs, then order the samples of a window of ``W`` GOPs at a time.

Exact uniform sampling (:class:`RandomFrames`) pays, for nearly every frame, a seek and a
decode from the keyframe: about ``G / 2`` decoded frames per delivered frame with GOPs of
``G`` frames. Sequential reading decodes each frame once but puts whole GOPs, and whole
videos, into one batch. ``GopShuffle`` sits in between, and keeps what makes SGD unbiased:
every sample exactly once per epoch.
"""

from __future__ import annotations

import contextlib
import weakref

import numpy as np

from ..errors import ConfigError
from ..index import VideoIndex
from ._base import Sampler
from ._checks import check_int, check_optional_int, check_plan_args
from ._gop_epoch import ORDERS, GopShuffleEpoch
from ._gop_table import GopTable
from ._space import ClipShape, SampleSpace


class GopShuffle(Sampler):
    r"""GOP-local shuffling: decode each GOP once per epoch, sequentially, at near-random order.

    Each epoch:

    1. the dataset's GOPs (keyframe to keyframe, from the index) are put in a keyed random
       order (key ``(seed, epoch)``): the *GOP stream*;
    2. the stream is cut into *blocks* of at most ``W`` consecutive GOPs (``ceil(K / W)``
       blocks of equal numbers of GOPs, give or take one);
    3. the samples (frames, or clip starts) of each block are put in order, and the blocks are
       laid end to end:

       - ``order="balanced"`` (default): in *rounds*. Each GOP visits its samples in a keyed
         order and spreads them evenly over the block's ``R`` rounds (``R`` its largest GOP:
         equal GOPs are in every round); a round holds one sample of each GOP that visits it,
         the GOPs always in the block's (keyed random) stream order. So any ``w``
         consecutive positions of a block of ``w`` equal GOPs are ``w`` distinct GOPs;
       - ``order="uniform"``: a keyed uniform permutation of the block's samples (key
         ``(seed, epoch, block)``); the order of ``GopShuffle`` before the balanced one;

    4. the result is cut into batches of ``B``; a batch may straddle two blocks.

    A clip belongs to the GOP of its first frame and may run on into the next GOP.

    **Unbiased.** The epoch is a permutation of all ``N`` samples, so every sample is seen
    exactly once per epoch and the epoch-average gradient is the full-data gradient. Over the
    random orders each batch holds a given sample with probability ``B / N``, as uniform
    sampling does (in the balanced order a sample's round is uniform over the rounds, and
    its GOP's place in the cycle uniform), so :math:`\mathbb{E}[\nabla_{\text{batch}}] =
    \nabla_{\text{full}}` at every step; exactly so when GOPs hold equal numbers of
    samples, within a relative :math:`|g - \bar G| / (W \bar G)` for a sample of a GOP of
    ``g`` samples otherwise (both orders).

    **The cost is variance, not bias.** With intra-GOP correlation :math:`\rho` the batch
    mean's variance grows by the design effect :math:`\text{deff} = 1 + (\bar m_{gop} -
    1)\rho` (plus :math:`(\bar m_{video} - \bar m_{gop})\rho_v` for the correlation
    :math:`\rho_v` of different GOPs of one video), :math:`\bar m_{gop}` the mean number of
    batch samples that share a sample's GOP: the batch is worth ``B / deff`` independent
    samples.

    - Uniform order: :math:`\bar m_{gop} = 1 + (B-1)\frac{G-1}{WG-1}` (a few percent less
      when batches straddle blocks), about 2 at ``W = B``: deff :math:`\approx 1 + \rho`.
    - Balanced order: a batch inside a block of ``w >= B`` equal GOPs holds at most one
      sample per GOP, at any phase, so :math:`\bar m_{gop} = 1` and deff = 1 at the same
      memory and decode cost; below exact uniform sampling's
      :math:`1 + (B-1)\frac{G-1}{N-1}`. With ``w < B``, :math:`\bar m_{gop} \approx B / w`.
      With unequal GOPs, one of more than ``M / B`` samples (``M`` its block's samples)
      must put two samples into some batch: :func:`vidloader.analysis._clustering.balanced_mbar` has the
      formula.

    What neither order changes: the batches of one block all draw from the same ``W`` GOPs,
    so consecutive batches are correlated with each other (the balanced order removes
    clustering *within* a batch, not *between* batches of a block); and samples of one video
    in different GOPs meet in a batch about as often as under uniform sampling,
    :math:`\bar m_{video} - \bar m_{gop} \approx (B - 1)\frac{\sum_v n_v^2 - \sum_g
    g^2}{N^2}`, large when the dataset has few videos. ``W`` at least the number of GOPs is
    one block: exact uniform shuffling (uniform order) or one round-robin over all GOPs
    (balanced order). Measure it with :func:`vidloader.analysis.sampling_report`;
    ``docs/sampling.md`` has the derivations.

    **Speed.** A batch touches at most ``W`` GOPs per block it draws from, and a block's
    batches are consecutive. A worker that takes a whole block (``plan.decode_units()``, or
    a lookahead of ``plan.preferred_lookahead`` batches) enters each GOP once and decodes it
    forward, so decoding costs about one decoded frame per delivered frame, like sequential
    reading, in either order. The price is memory: a block's samples (``W * G``) are in
    flight at once.

    **Distributed.** Rank ``r`` of ``R`` takes the contiguous run ``[r*n, (r+1)*n)`` of the
    epoch order (``n`` as for the other samplers: ``ceil(N / R)`` padded by wrapping to the
    start of the epoch, or ``floor(N / R)`` with ``drop_last``), so each rank decodes its own
    blocks and no GOP is decoded by two ranks except at the run boundaries.

    Batches hold ``frame_indices`` of shape ``[B, sequence_length]``; ``is_clip`` is true
    when ``sequence_length > 1``.

    Args:
        window_gops (int | None): ``W``, most GOPs per block. ``None`` (default): for the
            balanced order, the least ``W`` whose blocks all hold at least ``B·q/Ḡ`` GOPs,
            ``q`` the ``window_quantile`` of the GOP sizes and ``Ḡ`` their mean
            (:meth:`window_for`: ``B`` on a large dataset of equal GOPs, at most ``2B - 1``
            times ``q/Ḡ``, never over ``4B``); for the uniform order, ``B``, which keeps
            :math:`\bar m_{gop} - 1 \approx (B - 1) / W` below 1.
        window_quantile (float): with ``window_gops=None`` and the balanced order: GOPs of up
            to this quantile of the GOP sizes never give a batch two samples (a GOP larger
            than ``M/B`` must, ``M`` the block's samples). 0.99 (default): ragged GOPs (scene
            cuts, short last GOPs) keep ``deff`` near 1 (1.28 → 1.02 on GOPs of 10–60 frames,
            for 1.8× the memory), and one outlier GOP cannot blow the blocks up.
        order (str): ``"balanced"`` (default) or ``"uniform"``, the order of a block's
            samples.
        sequence_length (int): frames per sample (1: single frames).
        stride (int): distance in frames between consecutive frames of a clip.
        step (int): distance in frames between consecutive clip starts in a video.
        seed (int): seed of all the orders and of the per-sample seeds.

    Raises:
        ConfigError: a bad option; at ``plan_epoch``, an index without keyframes or samples.
    """

    def __init__(
        self, *, window_gops: int | None = None, order: str = "balanced",
        window_quantile: float = 0.99, sequence_length: int = 1, stride: int = 1, step: int = 1,
        seed: int = 0,
    ) -> None:
        self.window_gops = check_optional_int("window_gops", window_gops, minimum=1)
        if isinstance(window_quantile, bool) or not isinstance(window_quantile, (int, float)) \
                or not 0 < window_quantile <= 1:
            raise ConfigError(f"window_quantile must be in (0, 1], got {window_quantile!r}: the "
                              "share of GOPs (by size) that never repeat within a batch")
        self.window_quantile = float(window_quantile)
        if not isinstance(order, str) or order not in ORDERS:
            raise ConfigError(
                f"order must be one of {', '.join(map(repr, ORDERS))}, got {order!r}: "
                "'balanced' (default) takes one sample per GOP per round, 'uniform' shuffles "
                "each block's samples uniformly"
            )
        self.order = order
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

    def window_for(self, batch_size: int, num_gops: int | None = None,
                   gop_sizes: np.ndarray | None = None) -> int:
        r"""``W`` used with batches of ``batch_size`` on an index of ``num_gops`` GOPs (of
        ``gop_sizes`` samples each, when given).

        ``window_gops`` if given. By default, ``batch_size`` for the uniform order; for the
        balanced order, the least ``W`` whose balanced blocks all hold at least ``T`` GOPs,
        :math:`\lceil K / \max(1, \lfloor K / T \rfloor) \rceil` (``B`` when
        ``num_gops`` is not given), with ``T = B`` for equal GOPs and
        :func:`target_block_gops` otherwise: ``T (1 + O(T / K))``, at most ``2T - 1``, and
        all ``K`` GOPs in one block when ``K < 2T``.
        """
        if self.window_gops is not None:
            return self.window_gops
        if self.order == "uniform" or num_gops is None:
            return batch_size
        target = target_block_gops(batch_size, gop_sizes, self.window_quantile)
        return default_balanced_window(num_gops, target)

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
        table = self.gop_table(index)
        plan = GopShuffleEpoch(
            table=table, window=self.window_for(batch_size, table.num_gops, table.sizes),
            seed=self.seed,
            epoch=epoch, batch_size=batch_size, rank=rank, world_size=world_size,
            drop_last=drop_last, is_clip=self.is_clip, order=self.order,
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


#: The default balanced block holds at most this many times ``B`` GOPs (memory bound).
MAX_BLOCK_GOPS_PER_BATCH_ROW = 4


def target_block_gops(batch_size: int, gop_sizes: np.ndarray | None, quantile: float) -> int:
    """GOPs a default balanced block must hold so that a GOP of up to the ``quantile`` of
    ``gop_sizes`` never puts two samples into one batch: ``ceil(B·q/Ḡ)``, at least ``B``,
    at most :data:`MAX_BLOCK_GOPS_PER_BATCH_ROW` ``· B``. (A GOP of ``g`` samples recurs every
    ``≈ M/g`` positions of its block of ``M`` samples; a block of ``n`` GOPs holds
    ``M ≈ n·Ḡ``.)"""
    if gop_sizes is None or len(gop_sizes) == 0:
        return batch_size
    sizes = np.asarray(gop_sizes)
    q = float(np.quantile(sizes, quantile, method="higher"))
    target = int(np.ceil(batch_size * q / float(sizes.mean())))
    return int(min(MAX_BLOCK_GOPS_PER_BATCH_ROW * batch_size, max(batch_size, target)))


def default_balanced_window(num_gops: int, batch_size: int) -> int:
    """The least ``W`` whose ``ceil(K / W)`` balanced blocks all hold at least ``B`` GOPs.

    ``W = ceil(K / f)`` with ``f = max(1, K // B)`` makes at most ``f`` blocks, of at least
    ``K / f >= B`` GOPs each (when ``K >= B``); any smaller ``W`` makes more than ``f``
    blocks, and ``K / (f + 1) < B``, so one of them holds fewer than ``B`` GOPs.
    """
    return -(-num_gops // max(1, num_gops // batch_size))
