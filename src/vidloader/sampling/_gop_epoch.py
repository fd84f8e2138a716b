"""One epoch of :class:`~vidloader.sampling.GopShuffle`: GOP blocks, shuffled inside, laid end
to end, sharded over ranks and cut into batches; every batch computable on its own.

Three pure maps of integers, as in :mod:`._epoch`:

1. stream position ``i`` → GOP: a keyed permutation of the non-empty GOPs (key ``(seed,
   epoch)``); the stream is cut into ``ceil(K / W)`` blocks of equal numbers of GOPs
   (give or take one, so at most ``W``);
2. epoch position ``p`` → sample: ``p`` falls in block ``k`` (binary search in the blocks'
   prefix sums of sample counts), at offset ``o``; a keyed permutation of the block's ``M_k``
   samples (key ``(seed, epoch, k)``) sends ``o`` to ``o'``, and ``o'`` falls in one GOP of
   the block (binary search in the block's GOP sizes);
3. (rank, batch, row) → epoch position: each rank takes one contiguous run of the epoch
   order, so its stream keeps the blocks (GOP locality) whole.

Holding: two int64 per GOP (the table) and one per block (prefix sums). Batch ``b`` costs
O(B) plus O(W) per block it touches (the block's GOPs, cached for the next batch).
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
from ._permutation import KeyedPermutation, counter_stream, derive_seed

# Purpose tags for derive_seed (distinct from _epoch's 1..3 so no key is shared).
_GOP_ORDER_TAG = 11
_BLOCK_TAG = 12
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


class GopShuffleEpoch(EpochPlan):
    """One rank's share of one :class:`GopShuffle` epoch, batches computed on demand.

    Attributes:
        epoch (int), rank (int), world_size (int), batch_size (int), drop_last (bool): as
            passed to ``plan_epoch``.
        window (int): most GOPs per block (``W``); blocks are balanced, so each holds
            ``num_gops / num_blocks`` GOPs, give or take one.
        epoch_samples (int): samples in the epoch over all ranks (``N``).
        num_samples (int): samples this rank delivers (padding included).
        num_blocks (int): blocks in the whole epoch, ``ceil(num_gops / W)``.
        block_starts (np.ndarray): int64 ``[num_blocks + 1]`` epoch position of each block.
    """

    def __init__(
        self, *, table: GopTable, window: int, seed: int, epoch: int, batch_size: int,
        rank: int, world_size: int, drop_last: bool, is_clip: bool,
    ) -> None:
        self.epoch, self.batch_size, self.drop_last = epoch, batch_size, drop_last
        self.rank, self.world_size, self.window = rank, world_size, window
        self.epoch_samples = table.space.size
        self.num_samples = shard_length(self.epoch_samples, world_size, drop_last)
        self._table, self._seed, self._is_clip = table, seed, is_clip
        self._gop_order = KeyedPermutation(table.num_gops, derive_seed(seed, epoch, _GOP_ORDER_TAG))
        self._bounds = block_bounds(table.num_gops, window)
        self.block_starts = block_starts(table.sizes, self._gop_order, self._bounds)
        self.num_blocks = len(self.block_starts) - 1
        self._seed_key = derive_seed(seed, epoch, _SAMPLE_SEED_TAG)
        self._num_batches = num_batches(self.num_samples, batch_size, drop_last)
        # Consecutive batches hit the same block: keep the last few blocks' GOP lists.
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
        return self._block(block)[0]

    def _load_block(self, block: int) -> tuple[np.ndarray, np.ndarray, KeyedPermutation]:
        gops = self._gop_order(np.arange(self._bounds[block], self._bounds[block + 1]))
        cum = np.concatenate([[0], np.cumsum(self._table.sizes[gops])]).astype(np.int64)
        key = derive_seed(self._seed, self.epoch, _BLOCK_TAG, block)
        return gops, cum, KeyedPermutation(int(cum[-1]), key)

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
            gops, cum, perm = self._block(k)
            offsets = perm(positions[sel] - self.block_starts[k])
            j = np.searchsorted(cum, offsets, side="right") - 1
            out[sel] = self._table.starts[gops[j]] + offsets - cum[j]
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

    def __iter__(self) -> Iterator[BatchPlan]:
        return (self.batch(b) for b in range(self._num_batches))

    def __repr__(self) -> str:
        return (
            f"GopShuffleEpoch(epoch={self.epoch}, rank={self.rank}/{self.world_size}, "
            f"{self._num_batches} batches of {self.batch_size}, {self.num_blocks} blocks of "
            f"{self.window} GOPs, {self.num_samples} samples of {self.epoch_samples})"
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
    rows = slice(row_start, row_stop)
    return BatchPlan(
        epoch=plan.epoch,
        batch_index=plan.batch_index,
        video_indices=plan.video_indices[rows],
        frame_indices=plan.frame_indices[rows],
        sample_seeds=plan.sample_seeds[rows],
        is_clip=plan.is_clip,
        labels=None if plan.labels is None else plan.labels[rows],
    )
