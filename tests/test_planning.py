"""Planner: GOP grouping, ordering, de-duplication, delivery map, cost, speed."""

from __future__ import annotations

import time
from collections import defaultdict
from fractions import Fraction

import av
import numpy as np
import pytest

from vidloader.decoding import CpuExecutor
from vidloader.errors import FrameIndexError
from vidloader.index import VideoIndex, VideoRecord, probe_video
from vidloader.planning import (
    DeliveryMap,
    delivery_map,
    estimated_decode_cost,
    group_frames,
    plan_tasks,
    plan_tasks_for_frames,
)
from vidloader.sampling._base import BatchPlan
from vidloader.synthetic import VideoSpec, make_video


def _record(path: str, num_frames: int, keyframes) -> VideoRecord:
    return VideoRecord(
        path=path,
        codec="h264",
        width=64,
        height=48,
        pix_fmt="yuv420p",
        bit_depth=8,
        rotation=0,
        fps=30.0,
        time_base=Fraction(1, 30),
        num_frames=num_frames,
        keyframes=np.asarray(keyframes, np.int64),
        pts=np.arange(num_frames, dtype=np.int64) * 2,
    )


INDEX = VideoIndex(
    [
        _record("/data/a.mp4", 100, range(0, 100, 10)),
        _record("/data/b.mp4", 50, [0, 25]),
        _record("/data/c.mp4", 30, [0, 7, 19]),
    ]
)


def _plan(videos, frames, batch_index: int = 0) -> BatchPlan:
    videos = np.asarray(videos, np.int64)
    frames = np.asarray(frames, np.int64).reshape(len(videos), -1)
    return BatchPlan(0, batch_index, videos, frames, np.zeros(len(videos), np.uint64), True)


def _requests(plans) -> dict[int, set[int]]:
    wanted = defaultdict(set)
    for p in plans:
        for v, row in zip(p.video_indices.tolist(), p.frame_indices.tolist()):
            wanted[v].update(row)
    return wanted


def _check_tasks(tasks, plans) -> None:
    """Tasks cover exactly the requested frames, grouped by GOP, sorted and unique."""
    wanted = _requests(plans)
    assert [t.video_index for t in tasks] == sorted(wanted)
    for task in tasks:
        record = INDEX[task.video_index]
        assert task.record is record
        keys = [g.keyframe for g in task.gops]
        assert keys == sorted(set(keys))
        for gop in task.gops:
            f = gop.frames
            assert f.dtype == np.int64 and np.all(np.diff(f) > 0)
            assert np.all(record.keyframe_before(f) == gop.keyframe)
        assert task.frames.tolist() == sorted(wanted[task.video_index])


def test_groups_by_video_and_gop_in_order():
    plan = _plan([2, 0, 1, 0], [[20, 3, 7, 8], [95, 11, 12, 19], [30, 24, 25, 0], [12, 11, 99, 5]])
    tasks = plan_tasks(plan, INDEX)
    _check_tasks(tasks, [plan])
    a = tasks[0]
    assert [(g.keyframe, g.frames.tolist()) for g in a.gops] == [
        (0, [5]),
        (10, [11, 12, 19]),
        (90, [95, 99]),
    ]
    c = tasks[2]
    assert [(g.keyframe, g.frames.tolist()) for g in c.gops] == [(0, [3]), (7, [7, 8]), (19, [20])]


def test_duplicates_are_decoded_once_and_delivered_to_every_slot():
    # Samples 0 and 2 share a clip; sample 1 repeats a frame inside its own clip.
    plan = _plan([1, 1, 1], [[4, 5, 6], [30, 30, 31], [4, 5, 6]])
    (task,) = plan_tasks(plan, INDEX)
    assert task.frames.tolist() == [4, 5, 6, 30, 31]
    dmap = delivery_map(plan)
    assert len(dmap) == 5
    assert dmap[(1, 4)] == [(0, 0), (2, 0)]
    assert dmap[(1, 30)] == [(1, 0), (1, 1)]
    naive = defaultdict(list)
    for b, row in enumerate(plan.frame_indices.tolist()):
        for t, f in enumerate(row):
            naive[(int(plan.video_indices[b]), f)].append((b, t))
    assert dmap.as_dict() == dict(naive)
    slots = dmap.task_slots(task)
    assert sorted(slots) == task.frames.tolist()
    assert slots[30].tolist() == [3, 4]  # flat slots b * T + t
    assert dmap.slots_of(0, 4).size == 0
    with pytest.raises(KeyError):
        dmap[(0, 4)]


def test_lookahead_plans_share_gops_and_number_slots_in_sequence():
    p0 = _plan([0, 2], [[11, 12], [8, 9]])
    p1 = _plan([0], [[12, 15]], batch_index=1)
    tasks = plan_tasks([p0, p1], INDEX)
    _check_tasks(tasks, [p0, p1])
    assert [(g.keyframe, g.frames.tolist()) for g in tasks[0].gops] == [(10, [11, 12, 15])]
    dmap = delivery_map([p0, p1])
    assert dmap.slots_of(0, 12).tolist() == [1, 4]  # plan 1's slots follow plan 0's 4
    assert group_frames(np.array([2, 2]), np.array([9, 8]), INDEX)[0].frames.tolist() == [8, 9]


def test_estimated_decode_cost_counts_keyframe_to_last_wanted():
    task = plan_tasks_for_frames(0, INDEX[0], [3, 5, 12, 12])
    assert estimated_decode_cost(task) == (5 - 0 + 1) + (12 - 10 + 1)
    intra = _record("/data/i.mp4", 10, range(10))
    assert estimated_decode_cost(plan_tasks_for_frames(0, intra, [1, 4, 9])) == 3


def test_plan_tasks_for_frames_sorts_and_dedups():
    task = plan_tasks_for_frames(7, INDEX[2], np.array([20, 3, 20, 0, 7]))
    assert task.video_index == 7 and task.frames.tolist() == [0, 3, 7, 20]
    assert [g.keyframe for g in task.gops] == [0, 7, 19]
    empty = plan_tasks_for_frames(1, INDEX[1], [])
    assert empty.gops == () and empty.frames.size == 0
    assert plan_tasks([], INDEX) == []


@pytest.mark.parametrize(
    ("videos", "frames", "match"),
    [
        ([0], [[100]], "/data/a.mp4.*100"),
        ([1], [[-1]], "/data/b.mp4.*-1"),
        ([3], [[0]], "video 3"),
        ([-1], [[0]], "video -1"),
    ],
)
def test_out_of_range_requests_raise(videos, frames, match):
    with pytest.raises(FrameIndexError, match=match):
        plan_tasks(_plan(videos, frames), INDEX)
    if videos[0] >= 0 and videos[0] < len(INDEX):
        with pytest.raises(FrameIndexError, match=match):
            plan_tasks_for_frames(0, INDEX[videos[0]], frames[0])


def _median_ms(fn, repeat: int = 15) -> float:
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times)) * 1e3


def test_planning_a_128x16_batch_is_fast():
    index = VideoIndex([_record(f"/data/{i}.mp4", 300, range(0, 300, 30)) for i in range(1000)])
    rng = np.random.default_rng(0)
    starts = rng.integers(0, 300 - 32, 128)
    clips = _plan(rng.integers(0, 1000, 128), starts[:, None] + 2 * np.arange(16))
    scattered = _plan(rng.integers(0, 1000, 128), rng.integers(0, 300, (128, 16)))
    assert _median_ms(lambda: plan_tasks(clips, index)) < 5.0
    assert _median_ms(lambda: delivery_map(clips)) < 1.0
    # Worst case: every one of the 2048 frames in its own GOP (one object per GOP).
    assert _median_ms(lambda: plan_tasks(scattered, index)) < 10.0


@pytest.fixture(scope="session")
def real_index(tmp_path_factory) -> VideoIndex:
    root = tmp_path_factory.mktemp("planning_media")
    specs = [
        VideoSpec(width=64, height=48, num_frames=40, gop=10, bframes=2, seed=21),
        VideoSpec(width=64, height=48, num_frames=30, gop=8, bframes=0, seed=22),
    ]
    return VideoIndex([probe_video(make_video(root / f"v{i}.mp4", s)) for i, s in enumerate(specs)])


def _reference(path: str) -> np.ndarray:
    with av.open(path) as c:
        frames = sorted(c.decode(c.streams.video[0]), key=lambda f: f.pts)
        return np.stack([f.to_ndarray(format="rgb24") for f in frames])


def test_plan_decode_and_deliver_fills_every_slot_exactly(real_index):
    plan = _plan([1, 0, 1, 0], [[3, 4, 5], [12, 12, 39], [3, 4, 5], [0, 21, 9]])
    batch = np.zeros((4, 3, 48, 64, 3), np.uint8)
    flat = batch.reshape(12, 48, 64, 3)
    dmap = delivery_map(plan)
    with CpuExecutor() as ex:
        for task in plan_tasks(plan, real_index):
            slots = dmap.task_slots(task)

            def sink(i, frame, slots=slots):
                flat[slots[i]] = frame.to_rgb()

            ex.decode(task, sink)
        assert ex.stats.delivered == len(dmap) == 8
    refs = [_reference(r.path) for r in real_index]
    for b, (v, row) in enumerate(zip(plan.video_indices, plan.frame_indices)):
        np.testing.assert_array_equal(batch[b], refs[v][row])


def test_delivery_map_of_no_requests_is_empty():
    dmap = DeliveryMap.from_requests(np.empty(0, np.int64), np.empty(0, np.int64))
    assert len(dmap) == 0 and dmap.as_dict() == {}
    assert dmap.task_slots(plan_tasks_for_frames(0, INDEX[0], [1])) == {}
