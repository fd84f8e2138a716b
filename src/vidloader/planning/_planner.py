"""Batch plans → decode tasks: group requested frames by video and GOP, sort, de-duplicate.

A batch asks for ``B×T`` (video, frame) pairs. Decoding them in the order asked would seek
once per pair; grouping them by video and by GOP (keyframe to keyframe), sorted and unique,
lets an executor seek at most once per GOP and decode each needed GOP once, however many
samples share it. :class:`DeliveryMap` tells the caller where each decoded frame goes.

Everything here is numpy-vectorised over the requests; the only Python loops run over
videos and GOPs, never over requested frames.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ..decoding._base import DecodeTask, GopRequest
from ..errors import FrameIndexError
from ..index import VideoRecord
from ..sampling._base import BatchPlan

# Requests are packed as ``video << 32 | frame`` so one sort orders them by video, then frame.
_FRAME_BITS = 32
_FRAME_MASK = (1 << _FRAME_BITS) - 1


def plan_tasks(
    plan: BatchPlan | Sequence[BatchPlan], index: Sequence[VideoRecord]
) -> list[DecodeTask]:
    """Decode tasks covering every frame of one batch plan (or of several, for lookahead).

    Args:
        plan: a batch plan, or a sequence of them planned together (frames shared between
            the plans are decoded once).
        index: the :class:`~vidloader.index.VideoIndex` the plan refers to (any sequence of
            records works).

    Returns:
        One task per video, ordered by video index; each task's GOPs are sorted and hold
        sorted, unique frames.

    Raises:
        FrameIndexError: a video or frame index is out of range (the message names the file).
    """
    plans = [plan] if isinstance(plan, BatchPlan) else list(plan)
    if not plans:
        return []
    videos = np.concatenate([_flat_videos(p) for p in plans])
    frames = np.concatenate([np.asarray(p.frame_indices, np.int64).ravel() for p in plans])
    return group_frames(videos, frames, index)


def group_frames(
    video_indices: np.ndarray, frame_indices: np.ndarray, index: Sequence[VideoRecord]
) -> list[DecodeTask]:
    """Group flat (video, frame) requests into decode tasks (the reusable core of planning).

    Args:
        video_indices: int ``[N]`` video of each request.
        frame_indices: int ``[N]`` display frame number of each request.
        index: the records the video indices refer to.

    Returns:
        Tasks ordered by video index, duplicates removed.
    """
    videos = np.asarray(video_indices, np.int64).ravel()
    frames = np.asarray(frame_indices, np.int64).ravel()
    if videos.shape != frames.shape:
        raise ValueError(f"{videos.size} video indices for {frames.size} frame indices")
    if videos.size == 0:
        return []
    _check_requests(videos, frames, index)
    keys = np.unique((videos << _FRAME_BITS) | frames)
    return _tasks(keys >> _FRAME_BITS, keys & _FRAME_MASK, index.__getitem__)


def plan_tasks_for_frames(
    video_index: int, record: VideoRecord, frame_indices: Sequence[int] | np.ndarray
) -> DecodeTask:
    """The decode task for some frames of one video (any order, duplicates allowed).

    Raises:
        FrameIndexError: a frame index is outside ``[0, record.num_frames)``.
    """
    return DecodeTask.for_frames(video_index, record, frame_indices)


def estimated_decode_cost(task: DecodeTask) -> int:
    """Frames a decoder passes through for ``task`` without frame skipping.

    For each GOP: ``last wanted − keyframe + 1`` (decode from the keyframe up to the last
    wanted frame). Skipping non-reference frames makes the real cost lower.
    """
    return sum(g.last - g.keyframe + 1 for g in task.gops)


def _tasks(
    videos: np.ndarray, frames: np.ndarray, record_of: Callable[[int], VideoRecord]
) -> list[DecodeTask]:
    """Tasks from requests sorted by (video, frame), unique and checked.

    Vectorised over requests; Python loops only over videos (one searchsorted each) and
    over GOPs (one small object each).
    """
    n = len(frames)
    if n == 0:
        return []
    new_video = np.empty(n, bool)
    new_video[0] = True
    np.not_equal(videos[1:], videos[:-1], out=new_video[1:])
    video_starts = np.flatnonzero(new_video).tolist()
    keyframes = np.empty_like(frames)
    records = []
    for s, e in zip(video_starts, [*video_starts[1:], n]):
        record = record_of(int(videos[s]))
        kf = record.keyframes
        keyframes[s:e] = kf[kf.searchsorted(frames[s:e], side="right") - 1]
        records.append(record)
    new_gop = new_video.copy()
    new_gop[1:] |= keyframes[1:] != keyframes[:-1]
    gop_starts = np.flatnonzero(new_gop)
    bounds = [*gop_starts.tolist(), n]
    gops = [
        GopRequest(keyframe=k, frames=frames[s:e])
        for k, s, e in zip(keyframes[gop_starts].tolist(), bounds[:-1], bounds[1:])
    ]
    # GOP position where each video's GOPs start: videos and GOPs share the sort order.
    first_gop = np.searchsorted(gop_starts, video_starts).tolist()
    return [
        DecodeTask(video_index=int(videos[s]), record=rec, gops=tuple(gops[a:b]))
        for s, rec, a, b in zip(video_starts, records, first_gop, [*first_gop[1:], len(gops)])
    ]


def _flat_videos(plan: BatchPlan) -> np.ndarray:
    """``[B*T]`` video of every (sample, t) slot, matching ``frame_indices.ravel()``."""
    return np.repeat(np.asarray(plan.video_indices, np.int64), plan.frame_indices.shape[1])


def _num_frames(index: Sequence[VideoRecord]) -> np.ndarray:
    counts = getattr(index, "num_frames", None)  # VideoIndex caches it as an array
    if isinstance(counts, np.ndarray):
        return counts
    return np.fromiter((r.num_frames for r in index), np.int64, len(index))


def _check_requests(videos: np.ndarray, frames: np.ndarray, index: Sequence[VideoRecord]) -> None:
    """Raise FrameIndexError naming the file for the first out-of-range request."""
    if videos.min() < 0 or videos.max() >= len(index):
        bad = int(videos[(videos < 0) | (videos >= len(index))][0])
        raise FrameIndexError(f"video {bad} is out of range; the index has {len(index)} videos")
    bad = (frames < 0) | (frames >= _num_frames(index)[videos])
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        index[int(videos[i])].check_frames(frames[i])  # raises with the path and valid range
