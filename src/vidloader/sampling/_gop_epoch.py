"""One epoch of :class:`~vidloader.sampling.GopShuffle`: GOP blocks, ordered inside, laid end
to end, sharded over ranks and cut into batches; every batch computable on its own.

Three pure maps of integers, as in :mod:`._epoch`:

1. stream position ``i`` → GOP: a keyed permutation of the non-empty GOPs (key ``(seed,
   epoch)``); the stream is cut into ``ceil(K / W)`` blocks of equal numbers of GOPs
   (give or take one, so at most ``W``);
2. epoch position ``p`` → sample: ``p`` falls in block ``k`` (binary search in the blocks'
   prefix sums of sample counts), at offset ``o``, which the block's order sends to a sample
   of one of its GOPs:

   - ``order="uniform"``: a keyed permutation of the block's ``M_k`` samples (key ``(seed,
     epoch, k)``) sends ``o`` to ``o'``, and ``o'`` falls in one GOP of the block (binary
     search in the block's GOP sizes);
   - ``order="balanced"``: the block is a sequence of *rounds* (:class:`BalancedBlock`); ``o``
     falls in one round (binary search over rounds, O(W) per step), at one GOP of it;

3. (rank, batch, row) → epoch position: each rank takes one contiguous run of the epoch
   order, so its stream keeps the blocks (GOP locality) whole.

Holding: two int64 per GOP (the table) and one per block (prefix sums). Batch ``b`` costs
O(B) plus, per block it touches, O(W) (uniform) or O(W log G + W * (1 + B / W)) (balanced;
``G`` the block's largest GOP), with the block's per-GOP arrays cached for the next batch.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator

import numpy as np

from ..constants import DEFAULT_LOOKAHEAD_BATCHES
from ._base import BatchPlan, EpochPlan
from ._distributed import local_batch_positions, num_batches, shard_length
from ._epoch import _SAMPLE_SEED_TAG
from ._gop_table import GopTable
from ._permutation import MASK64, KeyedPermutation, counter_stream, derive_seed

#: In-block orders of :class:`~vidloader.sampling.GopShuffle`; the first is the default.
ORDERS = ("balanced", "uniform")

# Purpose tags for derive_seed (distinct from _epoch's 1..3 so no key is shared).
_GOP_ORDER_TAG = 11
_BLOCK_TAG = 12
_ROUND_PHASE_TAG = 13
_RANK_STEP_TAG = 14
_RANK_SHIFT_TAG = 15
#: Candidates drawn at once per multiplier in :func:`keyed_units`.
_UNIT_TRIES = 16
#: GOPs whose stream sizes are gathered at once when summing the blocks (bounds memory).
_CHUNK_GOPS = 1 << 20


def contiguous_shard(local: np.ndarray, *, total: int, share: int, rank: int) -> np.ndarray:
    """Global positions of this rank's samples ``local``: rank ``r`` takes ``[r*share, (r+1)*share)``.

    Counts and padding follow :mod:`._distributed` exactly (``share`` from
    :func:`shard_length`): with ``drop_last=False`` positions past the end wrap to the start
    of the epoch order; with ``drop_last=True`` the last ``total % world_size`` positions go
    unused. Only the assignment differs: contiguous runs instead of a stride, so every
    rank reads whole blocks of GOPs instead of every rank reading every block.
    """
    return (rank * share + np.asarray(local, np.int64)) % total


def block_bounds(num_gops: int, window: int) -> np.ndarray:
    """int64 ``[num_blocks + 1]``: block ``k`` is stream GOPs ``bounds[k] .. bounds[k+1] - 1``.

    ``ceil(num_gops / window)`` blocks of as equal a number of GOPs as possible (each at most
    ``window``, and at least ``window / 2`` unless there are fewer GOPs): a short last block
    would make the last batches of every epoch more clustered than the rest.
    """
    num_blocks = -(-num_gops // window)
    return np.arange(num_blocks + 1, dtype=np.int64) * num_gops // num_blocks


def block_starts(sizes: np.ndarray, gop_order: KeyedPermutation, bounds: np.ndarray) -> np.ndarray:
    """int64 ``[num_blocks + 1]`` epoch position where each block starts (then ``N``)."""
    num_blocks = len(bounds) - 1
    totals = np.empty(num_blocks, np.int64)
    per_chunk = max(1, _CHUNK_GOPS // max(1, int(bounds[1])))  # whole blocks per chunk
    for k0 in range(0, num_blocks, per_chunk):
        k1 = min(k0 + per_chunk, num_blocks)
        stream = sizes[gop_order(np.arange(bounds[k0], bounds[k1]))]
        totals[k0:k1] = np.add.reduceat(stream, bounds[k0:k1] - bounds[k0])
    return np.concatenate([[0], np.cumsum(totals)]).astype(np.int64)


def keyed_below(key: int, counters: np.ndarray, n: np.ndarray) -> np.ndarray:
    """Draws number ``counters`` of keyed streams, draw ``i`` uniform over ``[0, n[i])``.

    Like :func:`~._permutation.uniform_below` with one range per draw: exact, by redrawing
    (from derived streams) the values at or above the largest multiple of ``n[i]`` below
    ``2**64``.
    """
    c = np.asarray(counters, np.int64)
    n = np.broadcast_to(np.asarray(n, np.uint64), c.shape)
    limit = (np.uint64(MASK64) // n) * n
    values = counter_stream(key, c)
    bad = np.flatnonzero(values >= limit)
    attempt = 0
    while bad.size:
        attempt += 1
        values[bad] = counter_stream(derive_seed(key, attempt), c[bad])
        bad = bad[values[bad] >= limit[bad]]
    return (values % n).astype(np.int64)


def keyed_units(key: int, counters: np.ndarray, n: np.ndarray) -> np.ndarray:
    """Draws number ``counters``, draw ``i`` uniform over the integers of ``[0, n[i])``
    coprime to ``n[i]`` (0 for ``n[i] == 1``): multipliers of affine bijections mod ``n[i]``.

    Rejection from :data:`_UNIT_TRIES` uniform candidates at once (the first coprime one is
    uniform over the coprime ones); at least 1 in 6 integers is coprime to ``n < 10**9``, so
    a further round is rarely needed.
    """
    c = np.asarray(counters, np.int64)
    n = np.broadcast_to(np.asarray(n, np.int64), c.shape)
    out = np.empty(c.shape, np.int64)
    todo = np.arange(c.size)
    attempt = 0
    while todo.size:
        tries = c.reshape(-1)[todo, None] * _UNIT_TRIES + np.arange(_UNIT_TRIES)
        sizes = n.reshape(-1)[todo, None]
        cands = keyed_below(derive_seed(key, attempt), tries, sizes)
        ok = np.gcd(cands, sizes) == 1
        found = ok.any(axis=1)
        out.reshape(-1)[todo[found]] = cands[found, ok[found].argmax(axis=1)]
        todo, attempt = todo[~found], attempt + 1
    return out


class UniformBlock:
    """The uniform order of one block: a keyed permutation of its ``M`` samples.

    Attributes:
        gops (np.ndarray): int64 ``[w]`` GOP numbers (rows of the :class:`GopTable`), stream
            order.
    """

    def __init__(self, table: GopTable, gops: np.ndarray, key: int) -> None:
        self.gops = gops
        self._first = table.starts[gops]
        self._cum = np.concatenate([[0], np.cumsum(table.sizes[gops])]).astype(np.int64)
        self._perm = KeyedPermutation(int(self._cum[-1]), key)

    def sample_ids(self, offsets: np.ndarray) -> np.ndarray:
        """int64 sample id at each offset (``0 <= offset < M``) of the block's order."""
        shuffled = self._perm(np.asarray(offsets, np.int64))
        j = np.searchsorted(self._cum, shuffled, side="right") - 1
        return self._first[j] + shuffled - self._cum[j]


class BalancedBlock:
    r"""The balanced order of one block: its samples in *rounds* of one sample per GOP.

    The block's ``w`` GOPs keep their (keyed random) stream order, the *cycle*; ``R`` is the
    size of the block's largest GOP. GOP ``j`` of ``g_j`` samples

    - visits its samples in a keyed order: its rank ``i`` (``0 <= i < g_j``) is its sample
      ``(a_j i + c_j) mod g_j``, with ``c_j`` uniform in ``[0, g_j)`` and ``a_j`` uniform
      among the integers coprime to ``g_j`` (an affine bijection, O(1) per sample and two
      int64 per GOP; a Feistel permutation per GOP would cost 8 to 32 keyed rounds per
      sample for nothing the statistics use: a sample's rank is uniform over keys through
      ``c_j`` alone, and which sample of a GOP a round takes does not change which GOPs
      a batch holds; the random ``a_j`` varies the distance in frames between a GOP's
      samples in consecutive rounds);
    - puts rank ``i`` into round :math:`\lfloor (iR + v_j) / g_j \rfloor` with a keyed phase
      ``v_j`` uniform in ``[0, R)``: its ``g_j`` samples spread evenly over the ``R`` rounds,
      at most one per round. A sample's round is exactly uniform over ``[0, R)``.

    Round ``r`` holds one sample of each GOP that visits it, *in cycle order*; the rounds,
    laid end to end, are the block's order. With GOPs of equal size every GOP visits every
    round, each round is the whole cycle in the same order, and any ``w`` consecutive
    positions of the block are ``w`` distinct GOPs, whatever the phase of the batches. (An
    order drawn afresh for every round would put a GOP on both sides of every round boundary
    that a batch straddles: :math:`\bar m - 1 \approx (B^2 - 1)/(3w^2)`, 1/3 at ``w = B``.)
    With unequal GOPs a GOP of ``g`` samples recurs every ``≈ M / g`` positions; one larger
    than ``M / B`` puts two samples into some batches, whatever the order.

    Position ``o`` of the block is found by a binary search over rounds on the prefix counts
    :math:`P(r) = \sum_j \min(g_j, \max(0, \lceil (r g_j - v_j) / R \rceil))`, O(w) per step;
    the rounds a contiguous run of positions spans are then laid out in O(w) each.

    Attributes:
        gops (np.ndarray): int64 ``[w]`` GOP numbers, stream (= cycle) order.
        rounds (int): ``R``.
    """

    def __init__(self, table: GopTable, gops: np.ndarray, keys: tuple[int, int, int]) -> None:
        self.gops = gops
        self.sizes = table.sizes[gops]
        self.rounds = int(self.sizes.max())
        self._first = table.starts[gops]
        # Keyed by GOP number (keys from balanced_keys), so a GOP's draws do not depend on
        # which block it fell in.
        phase_key, step_key, shift_key = keys
        self._phase = keyed_below(phase_key, gops, self.rounds)
        self._step = keyed_units(step_key, gops, self.sizes)
        self._shift = keyed_below(shift_key, gops, self.sizes)

    def before(self, rounds: np.ndarray) -> np.ndarray:
        """int64 ``[len(rounds), w]``: samples of each GOP in the rounds before each round."""
        num = np.asarray(rounds, np.int64)[:, None] * self.sizes - self._phase
        return np.clip(-(-num // self.rounds), 0, self.sizes)

    def round_of(self, offsets: np.ndarray) -> np.ndarray:
        """int64 round of each offset: ``r`` with ``P(r) <= offset < P(r + 1)``."""
        offsets = np.asarray(offsets, np.int64)
        lo, hi = np.zeros_like(offsets), np.full_like(offsets, self.rounds)
        while True:
            open_ = np.flatnonzero(hi - lo > 1)
            if not open_.size:
                return lo
            mid = (lo[open_] + hi[open_]) // 2
            below = self.before(mid).sum(axis=1) <= offsets[open_]
            lo[open_[below]], hi[open_[~below]] = mid[below], mid[~below]

    def sample_ids(self, offsets: np.ndarray) -> np.ndarray:
        """int64 sample id at each offset (``0 <= offset < M``) of the block's order.

        Offsets are taken in runs of consecutive values; a run costs two binary searches and
        O(w) per round it spans.
        """
        offsets = np.asarray(offsets, np.int64)
        out = np.empty_like(offsets)
        if not offsets.size:
            return out
        order = np.argsort(offsets, kind="stable")
        ordered = offsets[order]
        cuts = np.flatnonzero(np.diff(ordered) > 1) + 1
        starts, stops = np.concatenate([[0], cuts]), np.concatenate([cuts, [len(ordered)]])
        ends = self.round_of(np.concatenate([ordered[starts], ordered[stops - 1]]))
        for a, b, r0, r1 in zip(starts.tolist(), stops.tolist(), ends[: len(starts)].tolist(),
                                ends[len(starts):].tolist()):
            out[order[a:b]] = self._run(ordered[a:b], r0, r1)
        return out

    def _run(self, offsets: np.ndarray, first_round: int, last_round: int) -> np.ndarray:
        counts = self.before(np.arange(first_round, last_round + 2))
        # Round by round, GOP by GOP in cycle order: exactly the block's positions from P(r0).
        visits = np.flatnonzero((counts[1:] > counts[:-1]).ravel())
        row, slot = np.divmod(visits[offsets - counts[0].sum()], len(self.gops))
        rank = counts[row, slot]
        sizes = self.sizes[slot]
        return self._first[slot] + (self._step[slot] * rank + self._shift[slot]) % sizes


def balanced_keys(seed: int, epoch: int) -> tuple[int, int, int]:
    """Keys of a :class:`BalancedBlock`'s draws (round phases, rank steps, rank shifts)."""
    return tuple(derive_seed(seed, epoch, tag) for tag in (_ROUND_PHASE_TAG, _RANK_STEP_TAG,
                                                           _RANK_SHIFT_TAG))


class GopShuffleEpoch(EpochPlan):
    """One rank's share of one :class:`GopShuffle` epoch, batches computed on demand.

    Attributes:
        epoch (int), rank (int), world_size (int), batch_size (int), drop_last (bool): as
            passed to ``plan_epoch``.
        window (int): most GOPs per block (``W``); blocks are balanced, so each holds
            ``num_gops / num_blocks`` GOPs, give or take one.
        order (str): the in-block order, ``"balanced"`` or ``"uniform"``.
        epoch_samples (int): samples in the epoch over all ranks (``N``).
        num_samples (int): samples this rank delivers (padding included).
        num_blocks (int): blocks in the whole epoch, ``ceil(num_gops / W)``.
        block_starts (np.ndarray): int64 ``[num_blocks + 1]`` epoch position of each block.
    """

    def __init__(
        self, *, table: GopTable, window: int, seed: int, epoch: int, batch_size: int,
        rank: int, world_size: int, drop_last: bool, is_clip: bool, order: str = "balanced",
    ) -> None:
        if order not in ORDERS:
            raise ValueError(f"order must be one of {ORDERS}, got {order!r}")
        self.epoch, self.batch_size, self.drop_last = epoch, batch_size, drop_last
        self.rank, self.world_size, self.window, self.order = rank, world_size, window, order
        self.epoch_samples = table.space.size
        self.num_samples = shard_length(self.epoch_samples, world_size, drop_last)
        self._table, self._seed, self._is_clip = table, seed, is_clip
        self._gop_order = KeyedPermutation(table.num_gops, derive_seed(seed, epoch, _GOP_ORDER_TAG))
        self._bounds = block_bounds(table.num_gops, window)
        self.block_starts = block_starts(table.sizes, self._gop_order, self._bounds)
        self.num_blocks = len(self.block_starts) - 1
        self._seed_key = derive_seed(seed, epoch, _SAMPLE_SEED_TAG)
        self._balanced_keys = balanced_keys(seed, epoch)
        self._num_batches = num_batches(self.num_samples, batch_size, drop_last)
        # Consecutive batches hit the same block: keep the last few blocks' orders.
        self._block = functools.lru_cache(maxsize=8)(self._load_block)

    def __len__(self) -> int:
        return self._num_batches

    @property
    def preferred_lookahead(self) -> int:
        """Batches a worker should plan and decode together when it takes units of
        consecutive whole batches: one block's worth, ``ceil(M / B)``, and no fewer than
        the loader's default.

        Unit boundaries then fall anywhere inside blocks, and a block cut by one is entered
        by two units, so decoding costs up to ``1 + M / (L * B)`` decoded frames per
        delivered frame (measured 1.07 to 1.5). :meth:`decode_units` are aligned to the
        blocks and cost 1.0 with the same memory.
        """
        per_block = -(-self.epoch_samples // (self.num_blocks * self.batch_size))
        return max(DEFAULT_LOOKAHEAD_BATCHES, per_block)

    def positions(self, batch_index: int) -> np.ndarray:
        """int64 global epoch positions of batch ``batch_index``, ascending (but for the wrap)."""
        local = local_batch_positions(
            batch_index, self._num_batches, self.batch_size, self.num_samples
        )
        return contiguous_shard(
            local, total=self.epoch_samples, share=self.num_samples, rank=self.rank
        )

    def gops_of_block(self, block: int) -> np.ndarray:
        """int64 GOP numbers (rows of the :class:`GopTable`) of block ``block``, stream order."""
        return self._block(block).gops

    def _load_block(self, block: int) -> UniformBlock | BalancedBlock:
        gops = self._gop_order(np.arange(self._bounds[block], self._bounds[block + 1]))
        if self.order == "balanced":
            return BalancedBlock(self._table, gops, self._balanced_keys)
        return UniformBlock(self._table, gops, derive_seed(self._seed, self.epoch, _BLOCK_TAG, block))

    def blocks_of(self, positions: np.ndarray) -> np.ndarray:
        """int64 block of each epoch position."""
        return np.searchsorted(self.block_starts, positions, side="right").astype(np.int64) - 1

    def sample_ids(self, positions: np.ndarray) -> np.ndarray:
        """int64 sample id (of the sample space) at each epoch position."""
        positions = np.asarray(positions, np.int64)
        blocks = self.blocks_of(positions)
        out = np.empty_like(positions)
        for k in np.unique(blocks).tolist():
            sel = blocks == k
            out[sel] = self._block(k).sample_ids(positions[sel] - self.block_starts[k])
        return out

    def batch(self, batch_index: int) -> BatchPlan:
        """The plan of batch ``batch_index``.

        Rows come block by block (in epoch order) and, inside a block, sorted by sample id,
        i.e. by video, then frame: the frames of one GOP sit together. A batch is a set for
        SGD, so the row order costs nothing statistically; it makes :meth:`segments`
        contiguous row ranges.
        """
        positions = self.positions(batch_index)
        ids = self.sample_ids(positions)
        order = np.lexsort((ids, _segment_ids(positions, self.blocks_of(positions))))
        videos, frames = self._table.space.locate(ids[order])
        return BatchPlan(
            epoch=self.epoch,
            batch_index=batch_index,
            video_indices=videos,
            frame_indices=frames,
            # Keyed on the global position: the same on resume, whatever the rank or batching.
            sample_seeds=counter_stream(self._seed_key, positions[order]),
            is_clip=self._is_clip,
        )

    def segments(self, batch_index: int) -> list[tuple[int, int, int]]:
        """``(block, row_start, row_stop)`` for each block batch ``batch_index`` draws from.

        The rows of one block are contiguous in :meth:`batch`'s plan, so a worker that owns
        block ``k`` can fill exactly those rows (``plan`` rows ``row_start:row_stop``).
        """
        positions = self.positions(batch_index)
        blocks = self.blocks_of(positions)
        seg = _segment_ids(positions, blocks)
        cuts = np.flatnonzero(np.diff(seg)) + 1
        starts = np.concatenate([[0], cuts]).tolist()
        stops = [*starts[1:], len(blocks)]
        return [(int(blocks[s]), s, e) for s, e in zip(starts, stops)]

    def decode_units(self, first_batch: int = 0) -> Iterator[list[tuple[int, int, int]]]:
        """This rank's work from batch ``first_batch`` on, one unit per block:
        ``[(batch, row_start, row_stop), ...]``.

        Units come in stream order. A worker given a unit plans its parts together
        (:func:`vidloader.planning.plan_tasks` on the row slices, see :func:`slice_plan`), so
        it enters each GOP of the block once and decodes it forward. A batch that straddles
        two blocks is filled by two units (disjoint rows, as :meth:`segments` says). Costs
        O(units + parts): the unit boundaries come from the block prefix sums, not from
        the batches.
        """
        delivered = min(self.num_samples, self._num_batches * self.batch_size)
        first = self.rank * self.num_samples  # global position of local 0, before wrapping
        n = self.epoch_samples
        starts = np.concatenate([self.block_starts[1:-1], n + self.block_starts[:-1]])
        cuts = starts[(starts > first + first_batch * self.batch_size) & (starts < first + delivered)]
        bounds = [first_batch * self.batch_size, *(cuts - first).tolist(), delivered]
        for a, b in zip(bounds[:-1], bounds[1:]):
            yield self._parts(a, b)

    def _parts(self, start: int, stop: int) -> list[tuple[int, int, int]]:
        """``(batch, row_start, row_stop)`` of this rank's local samples ``start .. stop - 1``."""
        size = self.batch_size
        return [
            (k, max(start, k * size) - k * size, min(stop, (k + 1) * size) - k * size)
            for k in range(start // size, -(-stop // size))
        ]


    def __repr__(self) -> str:
        return (
            f"GopShuffleEpoch(epoch={self.epoch}, rank={self.rank}/{self.world_size}, "
            f"{self._num_batches} batches of {self.batch_size}, {self.num_blocks} blocks of "
            f"{self.window} GOPs, {self.order} order, {self.num_samples} samples of "
            f"{self.epoch_samples})"
        )


def _segment_ids(positions: np.ndarray, blocks: np.ndarray) -> np.ndarray:
    """Run number of each position: a new run wherever the block changes or the positions
    jump (the wrap of the padding back to the start of the epoch)."""
    seg = np.zeros(len(blocks), np.int64)
    if len(blocks) > 1:
        new = (blocks[1:] != blocks[:-1]) | (positions[1:] != positions[:-1] + 1)
        np.cumsum(new, out=seg[1:])
    return seg


def slice_plan(plan: BatchPlan, row_start: int, row_stop: int) -> BatchPlan:
    """Rows ``row_start:row_stop`` of ``plan`` as a plan of their own (same batch index)."""
    return plan.rows(row_start, row_stop)
