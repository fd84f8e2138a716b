"""Units of work: which rows of which batches one worker (or one GPU submission) fills together.

A unit is a list of :class:`Part` s, each a row range of one batch. Two shapes exist:

- **whole batches**: ``lookahead`` consecutive batches, every row (random and sequential
  samplers, or any sampler when ``lookahead`` is given);
- **blocks**: a GOP-local plan (:class:`vidloader.GopShuffle`) says which rows belong to each
  of its blocks (``decode_units``), so a unit is exactly one block: every GOP of the block is
  entered once and decoded once. Units of whole batches cut blocks anywhere, and each GOP of
  a cut block was then decoded twice (1.58 decoded frames per delivered frame on the H200).
  A batch that straddles two blocks gets a part from each, with disjoint rows. A plan of
  streams (``row_affinity``: each row continues the same video from batch to batch) names
  units of a row over a few batches, and each row's units go to one worker
  (:func:`has_row_affinity`).
- **GOPs of streams** (NVDEC, separation mode): for a plan of streams, each row is cut into
  pieces at GOP boundaries (a piece: one row, from the batch where its video enters a GOP to
  the batch before it leaves it), and a unit holds the pieces that begin in
  :data:`STREAM_GOP_STRIDE` consecutive batches (:func:`stream_gop_units`). Each GOP is then
  decoded once, its frames dealt over the batches of its piece, where whole-batch units
  decoded it again from its keyframe for every unit that reached into it (3.1-3.4 decoded
  frames per delivered one on the W3 multi-camera stream, H200). NVDEC keeps no decoder
  open from one unit to the next, so the unit must hold the whole GOP.

A block unit can be split by video (:func:`split_by_video`) so that several CPU workers
decode disjoint GOPs of one block at once: within a block, a batch's rows are sorted by
sample, hence by video, so each worker's share of a batch is a contiguous row range.
"""

from __future__ import annotations

import dataclasses
import heapq
from collections.abc import Iterator

import numpy as np

from ..errors import FrameIndexError
from ._memory import max_gop_frames

#: Batches by which consecutive GOP-of-streams units advance: a unit holds the pieces that
#: begin in that many batches (about ``rows × 8 / GOP length`` GOPs: 13 on W3's 48 rows).
STREAM_GOP_STRIDE = 8
#: Whether the start-up ramp cuts the first batch into whole GOPs (:func:`first_batch_shares`)
#: rather than contiguous row ranges (before session 16; kept for A/B runs).
FIRST_BATCH_BY_GOP = True
#: The most batches one piece spans: a longer GOP is cut there, and its next piece decodes
#: from the keyframe again (what bounds the staging buffers a unit holds).
STREAM_GOP_MAX_BATCHES = 64


@dataclasses.dataclass(frozen=True)
class Part:
    """Rows ``row_start:row_stop`` of batch ``batch`` (``row_stop=None``: to the end)."""

    batch: int
    row_start: int = 0
    row_stop: int | None = None

    def rows(self, batch_size: int) -> tuple[int, int]:
        stop = batch_size if self.row_stop is None else min(self.row_stop, batch_size)
        return self.row_start, stop


def row_units(plan, start: int, rows: int) -> Iterator[list[Part]]:
    """Units of at most ``rows`` consecutive rows of one batch each, batch after batch (a
    short last batch is cut by its own size)."""
    for b in range(start, len(plan)):
        size = plan.batch(b).batch_size
        for a in range(0, size, rows):
            yield [Part(b, a, min(a + rows, size))]


def has_block_units(plan) -> bool:
    """Whether the epoch plan names its own decode units (GOP-local sampling, streams)."""
    return callable(getattr(plan, "decode_units", None))


def has_row_affinity(plan) -> bool:
    """Whether the plan's units are streams: each row continues the same video from one
    batch to the next, and a unit holds rows of consecutive batches (``plan.row_affinity``).
    The scheduler sends every unit of a row to the same worker, whose executor, keeping the
    row's video open, decodes it forward instead of from a keyframe again for every unit."""
    return bool(getattr(plan, "row_affinity", False)) and has_block_units(plan)


def whole_batch_units(start: int, num_batches: int, lookahead: int, *, ways: int = 1,
                      first_rows: int = 0, ramp: bool = True,
                      first_shares: list[list[Part]] | None = None) -> Iterator[list[Part]]:
    """Units of consecutive whole batches from ``start`` on, ramping up to ``lookahead``.

    The first batch waits for the unit that holds it, and a unit of ``lookahead`` batches in
    one worker took seconds (4 × 128 frames at about 130 frames/s per core): the first batch
    came 4 s after the workers were ready. So batch ``start`` is cut into ``ways`` units
    (every executor fills a share of it at once): ``first_shares`` if given (see
    :func:`first_batch_shares`), else its ``first_rows`` rows in contiguous ranges; the
    following rounds of ``ways`` units hold 1, 2, 4 … batches, up to ``lookahead``. With
    ``ramp=False`` (warm workers), every unit holds ``lookahead`` batches.
    """
    b = start
    if not ramp:
        for first in range(start, num_batches, lookahead):
            yield [Part(k) for k in range(first, min(first + lookahead, num_batches))]
        return
    if first_shares and start < num_batches:
        yield from first_shares
        b += 1
    elif ways > 1 and first_rows >= 2 * ways and start < num_batches:
        cuts = np.linspace(0, first_rows, ways + 1).round().astype(int).tolist()
        yield from ([Part(start, a, z)] for a, z in zip(cuts[:-1], cuts[1:]))
        b += 1
    size = 1
    while b < num_batches:
        for _ in range(max(1, ways)):
            yield [Part(k) for k in range(b, min(b + size, num_batches))]
            b += size
            if b >= num_batches:
                return
        size = min(lookahead, 2 * size)


def first_batch_shares(batch, index, ways: int) -> list[list[Part]] | None:
    """Batch ``batch`` (a :class:`~vidloader.sampling.BatchPlan`) cut into ``ways`` units of
    whole GOPs with about equal decode work, for the start-up ramp of
    :func:`whole_batch_units`; ``None`` where that cannot be done (one executor, fewer GOPs
    than executors, a batch of fewer than ``2 × ways`` rows): the caller cuts rows instead.

    A row goes with the GOP of its first frame (video, keyframe before it); a GOP's work is
    the frames from its keyframe to the last one its rows want. GOPs are dealt largest first,
    each to the least loaded unit. Cut into contiguous row ranges instead, rows of one GOP
    fell in different units and the GOP was decoded by each (uniform random frames, W1 on 2
    cores: 1,009 frames decoded for the first batch's 128 against 817 with GOPs kept whole,
    ``benchmarks/results/cpu/startup-session16``). A unit's rows are its runs of adjacent rows,
    a part each. A frame out of its video's range also gives ``None``: the worker reports it,
    as for any later batch.
    """
    videos = np.asarray(batch.video_indices, np.int64)
    if not FIRST_BATCH_BY_GOP or ways < 2 or len(videos) < 2 * ways:
        return None
    frames = np.asarray(batch.frame_indices, np.int64).reshape(len(videos), -1)
    first, last = frames.min(axis=1), frames.max(axis=1)
    keyframes = np.empty_like(first)
    order = np.argsort(videos, kind="stable")  # one vectorised lookup per video
    starts = np.flatnonzero(np.r_[True, videos[order][1:] != videos[order][:-1]])
    for a, z in zip(starts.tolist(), [*starts[1:].tolist(), len(order)]):
        rows = order[a:z]
        try:
            keyframes[rows] = index[int(videos[rows[0]])].keyframe_before(first[rows])
        except FrameIndexError:
            return None
    keys: dict[tuple[int, int], list[int]] = {}
    for row, key in enumerate(zip(videos.tolist(), keyframes.tolist())):
        keys.setdefault(key, []).append(row)
    if len(keys) < ways:
        return None
    work = {key: int(last[rows].max()) - key[1] + 1 for key, rows in keys.items()}
    loads = [(0, u) for u in range(ways)]  # (work, unit): a heap, least loaded first
    rows_of: list[list[int]] = [[] for _ in range(ways)]
    for key in sorted(keys, key=lambda k: (-work[k], k)):
        load, u = heapq.heappop(loads)
        rows_of[u].extend(keys[key])
        heapq.heappush(loads, (load + work[key], u))
    return [_runs(batch.batch_index, sorted(rows)) for rows in rows_of if rows]


def _runs(batch_index: int, rows: list[int]) -> list[Part]:
    """Sorted ``rows`` of one batch as parts of adjacent rows."""
    parts, a = [], rows[0]
    for prev, row in zip(rows, [*rows[1:], None]):
        if row != prev + 1:
            parts.append(Part(batch_index, a, prev + 1))
            a = row
    return parts


def block_units(plan, start: int) -> Iterator[list[Part]]:
    """One unit per block of a GOP-local plan, from batch ``start`` on."""
    for unit in plan.decode_units(first_batch=start):
        yield [Part(b, a, z) for b, a, z in unit if z > a]


def max_unit_batches(plan) -> int:
    """The most batches one block unit of ``plan`` touches (it bounds the staging slots a
    unit needs at once): ``plan.unit_batches`` where the plan knows it (a plan of streams),
    else linear in the number of blocks."""
    known = getattr(plan, "unit_batches", None)
    if known is not None:
        return int(known)
    return max((len(unit) for unit in plan.decode_units()), default=1)


def split_by_video(parts: list[Part], plans: dict, ways: int) -> list[list[Part]]:
    """Cut a unit into up to ``ways`` units of disjoint videos with about equal rows.

    ``plans`` maps each batch to its full :class:`~vidloader.sampling.BatchPlan`. Returns the
    unit unchanged when it cannot be cut: one video, or rows not sorted by video inside a
    part (the cut relies on that to keep each share of a batch contiguous).
    """
    videos = [plans[p.batch].video_indices[slice(*p.rows(plans[p.batch].batch_size))] for p in parts]
    if ways <= 1 or any(np.any(np.diff(v) < 0) for v in videos):
        return [parts]
    every = np.concatenate(videos)
    distinct, counts = np.unique(every, return_counts=True)
    if len(distinct) < 2:
        return [parts]
    ways = min(ways, len(distinct))
    # Video thresholds at equal shares of the rows; each share takes whole videos.
    cum = np.cumsum(counts)
    cuts = np.searchsorted(cum, cum[-1] * np.arange(1, ways) / ways, side="left")
    thresholds = np.unique(distinct[np.minimum(cuts + 1, len(distinct) - 1)])
    edges = [-np.inf, *thresholds.tolist(), np.inf]
    shares: list[list[Part]] = []
    for lo, hi in zip(edges[:-1], edges[1:]):
        share = []
        for p, v in zip(parts, videos):
            a, b = np.searchsorted(v, [lo, hi], side="left").tolist()
            if b > a:
                share.append(Part(p.batch, p.row_start + a, p.row_start + b))
        if share:
            shares.append(share)
    return shares


def stream_gop_span(index) -> int:
    """The most batches a piece of :func:`stream_gop_units` spans over ``index``: its longest
    GOP in frames (a row advances at least a frame per batch), at most
    :data:`STREAM_GOP_MAX_BATCHES`."""
    return max(1, min(STREAM_GOP_MAX_BATCHES, max_gop_frames(index)))


def stream_gop_units(plan, index, start: int, *, stride: int = STREAM_GOP_STRIDE,
                     span: int | None = None) -> Iterator[list[Part]]:
    """Units for NVDEC over a plan of streams, from batch ``start`` on (see the module
    docstring): each row is cut into pieces where its cell's (video, GOP of its first frame)
    changes, or after ``span`` batches; unit ``u`` holds the pieces beginning in batches
    ``start + u·stride … start + (u+1)·stride - 1``, as parts sorted by batch, then row
    (adjacent rows of a batch merged). Units come in order; each touches at most
    ``stride + span - 1`` batches, and unit ``u+1``'s begin ``stride`` batches after unit
    ``u``'s. Computed batch by batch, ``span`` batches ahead at most.

    Args:
        plan: an epoch plan (``len``, ``batch(b)`` with ``video_indices`` and
            ``frame_indices``).
        index: the records the plan's video indices refer to (``keyframes``).
        stride: batches of piece beginnings per unit.
        span: the most batches a piece spans (default :func:`stream_gop_span`).
    """
    span = stream_gop_span(index) if span is None else int(span)
    n = len(plan)
    cell_keys = _CellKeys(index)
    # The open pieces, one per row of the last batch: row r's key and first batch.
    keys_open = np.empty(0, np.int64)
    first_open = np.empty(0, np.int64)
    closed: list[tuple[int, int, int]] = []  # heap of (first, last, row)
    next_unit = 0

    def unit_of(first: int) -> int:
        return (first - start) // stride

    def emit(upto_unit: int) -> Iterator[list[Part]]:
        nonlocal next_unit
        while next_unit < upto_unit:
            pieces = []
            while closed and unit_of(closed[0][0]) == next_unit:
                pieces.append(heapq.heappop(closed))
            if pieces:
                yield _parts_of(pieces)
            next_unit += 1

    def close(rows: np.ndarray, last: int) -> None:
        for row, first in zip(rows.tolist(), first_open[rows].tolist()):
            heapq.heappush(closed, (first, last, row))

    for b in range(start, n):
        keys = cell_keys(plan.batch(b))
        rows = len(keys)
        if rows < len(keys_open):  # a shorter last batch: its missing rows end here
            close(np.arange(rows, len(keys_open)), b - 1)
            keys_open, first_open = keys_open[:rows], first_open[:rows]
        # Rows whose piece ends before this batch: another GOP, or ``span`` batches long. (A
        # loop over every row cost ~10 µs a row; a row's GOP changes every few dozen batches.)
        kept = len(keys_open)
        ended = np.flatnonzero((keys[:kept] != keys_open) | (b - first_open >= span))
        close(ended, b - 1)
        first_open = np.concatenate([first_open, np.full(rows - kept, b, np.int64)])
        first_open[ended] = b
        keys_open = keys.copy()
        # Every piece of a unit before the oldest open piece's unit is closed.
        yield from emit(unit_of(int(first_open.min())))
    close(np.arange(len(keys_open)), n - 1)
    yield from emit(unit_of(n - 1) + 1 if n > start else 0)


class _CellKeys:
    """Per batch of a plan of streams, the ``[rows]`` int64 key of each row's cell: its video
    and the keyframe of the GOP its first frame lies in (``video << 32 | keyframe``).

    Each row's GOP (its video, first keyframe and the next) is kept from one batch to the
    next: in stream order a row stays in its GOP for dozens of batches, so one comparison
    over the batch finds the few rows that left theirs, and only those are looked up (one
    ``searchsorted`` in their video's keyframes, read from the index once per video). One
    ``keyframe_before`` per video of every batch cost ~15 µs a row of W3, most of the units'
    planning time; a table of the batch's videos' keyframes rebuilt every batch cost more
    than that on hour-long videos (session 22's review)."""

    def __init__(self, index) -> None:
        if len(index) >= 1 << 31:  # the key packs the video into the high 32 bits
            raise ValueError(f"stream units key videos in 31 bits; the index has {len(index)}")
        self.index = index
        self._videos: dict[int, np.ndarray] = {}  # video -> its keyframes
        # Per row of the last batch: its video, its GOP's first frame and the GOP's end.
        self._video = np.empty(0, np.int64)
        self._lo = np.empty(0, np.int64)
        self._hi = np.empty(0, np.int64)

    def __call__(self, bp) -> np.ndarray:
        videos = np.asarray(bp.video_indices, np.int64)
        frames = np.asarray(bp.frame_indices, np.int64)[:, 0]
        rows, kept = len(videos), min(len(videos), len(self._video))
        video = np.concatenate([self._video[:kept], np.full(rows - kept, -1, np.int64)])
        lo = np.concatenate([self._lo[:kept], np.zeros(rows - kept, np.int64)])
        hi = np.concatenate([self._hi[:kept], np.zeros(rows - kept, np.int64)])
        for row in np.flatnonzero((videos != video) | (frames < lo) | (frames >= hi)).tolist():
            video[row] = v = int(videos[row])
            lo[row], hi[row] = self._gop(v, int(frames[row]))
        self._video, self._lo, self._hi = video, lo, hi
        return (video << 32) | lo

    def _gop(self, video: int, frame: int) -> tuple[int, int]:
        """``(first keyframe, end)`` of the GOP holding ``frame``: the end is the next keyframe
        or the video's length (``end == first``, never matched, where the record has no
        keyframe at or before the frame and ``keyframe_before`` is asked instead)."""
        record = self.index[video]
        keyframes = self._videos.get(video)
        if keyframes is None:
            keyframes = self._videos[video] = np.asarray(record.keyframes, np.int64)
        if not 0 <= frame < int(record.num_frames):
            record.check_frames(frame)  # names the video, the frame and the fix
            raise FrameIndexError(f"frame {frame} is outside video {video}")
        pos = int(np.searchsorted(keyframes, frame, side="right")) - 1
        if pos < 0:
            first = int(record.keyframe_before(frame))
            return first, first
        end = int(keyframes[pos + 1]) if pos + 1 < len(keyframes) else int(record.num_frames)
        return int(keyframes[pos]), end


def _parts_of(pieces: list[tuple[int, int, int]]) -> list[Part]:
    """Parts of pieces ``(first, last, row)``: per batch, runs of adjacent rows merged. The
    cells are expanded, sorted and cut into runs with numpy: a ``Part`` made per cell and
    merged cost ~1 µs a cell (48 rows × 37 batches a W3 unit)."""
    first, last, row = (np.asarray(c, np.int64) for c in zip(*pieces))
    lengths = last - first + 1
    cell_rows = np.repeat(row, lengths)
    offsets = np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    cell_batches = np.repeat(first, lengths) + offsets
    order = np.lexsort((cell_rows, cell_batches))  # by batch, then row
    batches, rows = cell_batches[order], cell_rows[order]
    # A run starts where the batch changes or the row is not the one after the last.
    starts = np.flatnonzero(np.r_[True, (batches[1:] != batches[:-1]) | (rows[1:] != rows[:-1] + 1)])
    stops = np.r_[starts[1:], len(rows)]
    return [Part(b, r0, r1 + 1) for b, r0, r1 in
            zip(batches[starts].tolist(), rows[starts].tolist(), rows[stops - 1].tolist())]
