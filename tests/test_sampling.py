"""The sampling laws: epochs are permutations, frames are uniform, streams are reproducible,
ranks partition the epoch, clips follow NVVL/DALI semantics, and it all scales."""

from __future__ import annotations

import bisect
import itertools
import json
import pickle
import time
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

import vidloader.sampling as sampling
import vidloader.sampling._epoch as _epoch
from vidloader.errors import ConfigError
from vidloader.index import VideoIndex, VideoRecord
from vidloader.sampling import (
    Clips,
    RandomFrames,
    SequentialFrames,
    detect_rank_world,
    resolve_labels,
)
from vidloader.sampling._permutation import (
    GOLDEN,
    KeyedPermutation,
    counter_stream,
    derive_seed,
    feistel_rounds,
    mix64,
    uniform_below,
)
from vidloader.sampling._space import ClipShape, SampleSpace

FRAME_COUNTS = [1, 7, 30, 100, 250, 3]
TOTAL = sum(FRAME_COUNTS)  # 391 = 17 * 23: not divisible by 2, 3 or 4
P_MIN = 1e-3  # chi-square tests pass above this p-value (seeds are fixed: no flakiness)


def make_index(counts) -> VideoIndex:
    return VideoIndex([
        VideoRecord(
            path=f"/data/video_{k}.mp4", codec="h264", width=64, height=48, pix_fmt="yuv420p",
            bit_depth=8, rotation=0, fps=30.0, time_base=Fraction(1, 30), num_frames=n,
            keyframes=np.arange(0, n, 10, dtype=np.int64), pts=np.arange(n, dtype=np.int64),
        )
        for k, n in enumerate(counts)
    ])


class ArrayIndex:
    """Stands in for a VideoIndex of millions of videos: samplers use only ``num_frames``."""

    def __init__(self, num_frames) -> None:
        self.num_frames = np.asarray(num_frames, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.num_frames)


@pytest.fixture(scope="module")
def index() -> VideoIndex:
    return make_index(FRAME_COUNTS)


OFFSETS = np.concatenate([[0], np.cumsum(FRAME_COUNTS)])


def frame_ids(batches) -> np.ndarray:
    """Global frame number (video offset + frame) of every sample of ``batches``, in order."""
    return np.concatenate([OFFSETS[b.video_indices] + b.frame_indices[:, 0] for b in batches])


def all_batches(sampler, index, **kwargs) -> list:
    kwargs.setdefault("epoch", 0)
    kwargs.setdefault("batch_size", 16)
    return list(sampler.plan_epoch(index, **kwargs))


def by_position(sampler, index, **kwargs) -> dict[int, tuple]:
    """Global epoch position → (video, frames, seed), from one rank's plan."""
    kwargs.setdefault("epoch", 0)
    plan = sampler.plan_epoch(index, **kwargs)
    out = {}
    for b in range(len(plan)):
        batch = plan.batch(b)
        for i, p in enumerate(plan.positions(b)):
            out[int(p)] = (
                int(batch.video_indices[i]), tuple(batch.frame_indices[i]),
                int(batch.sample_seeds[i]),
            )
    return out


# --- the keyed permutation -------------------------------------------------------------------

@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 17, 1000, 2**20 + 3])
def test_permutation_is_a_bijection(n):
    for key in (0, derive_seed(42, 7)):
        image = KeyedPermutation(n, key)(np.arange(n))
        assert image.dtype == np.int64
        np.testing.assert_array_equal(np.sort(image), np.arange(n))


def test_permutation_looks_random():
    n = 2**20 + 3
    x = np.arange(n)
    y = KeyedPermutation(n, derive_seed(1, 2))(x)
    assert (y == x).sum() < 10  # a random permutation has Poisson(1) fixed points
    ascending = np.diff(y) > 0
    breaks = np.flatnonzero(~ascending)
    assert np.diff(breaks).max() < 16  # longest monotone run of a random permutation: ~9
    assert 0.45 < ascending.mean() < 0.55
    assert abs(np.corrcoef(x, y)[0, 1]) < 0.01
    other = KeyedPermutation(n, derive_seed(1, 3))(x)
    assert (other == y).sum() < 10  # another key is an unrelated permutation


@pytest.mark.parametrize("n", [3, 5, 7, 40])
def test_permutation_pairs_are_uniform_over_keys(n):
    # Small domains are where a Feistel network mixes worst; pairs must still be uniform.
    keys = 3000
    images = np.array([KeyedPermutation(n, derive_seed(9, k))(np.arange(2)) for k in range(keys)])
    assert stats.chisquare(np.bincount(images[:, 0], minlength=n)).pvalue > P_MIN
    if n <= 7:
        pair_counts = np.bincount(images[:, 0] * n + images[:, 1], minlength=n * n)
        off_diagonal = pair_counts[~np.eye(n, dtype=bool).ravel()]
        assert pair_counts[np.eye(n, dtype=bool).ravel()].sum() == 0
        assert stats.chisquare(off_diagonal).pvalue > P_MIN


def test_permutation_rejects_positions_outside_the_domain():
    with pytest.raises(ValueError):
        KeyedPermutation(10, 0)(np.array([10]))


def test_seed_helpers():
    assert derive_seed(1, 2, 3) == derive_seed(1, 2, 3)
    assert derive_seed(1, 2, 3) != derive_seed(1, 3, 2)
    assert derive_seed(1, 2) != derive_seed(1, 2, 0)
    assert derive_seed(1, 2) != derive_seed(2, 1)
    assert len({derive_seed(s, e) for s in range(100) for e in range(100)}) == 10_000
    values = np.arange(1000, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    np.testing.assert_array_equal(
        mix64(values), np.array([mix64(int(v)) for v in values], dtype=np.uint64)
    )
    stream = counter_stream(5, np.arange(10))
    np.testing.assert_array_equal(stream[[7, 2]], counter_stream(5, np.array([7, 2])))


@pytest.mark.parametrize("n", [1, 7, 64, 1000])
def test_uniform_below_is_uniform(n):
    draws = uniform_below(derive_seed(3), np.arange(200 * n), n)
    assert draws.min() >= 0 and draws.max() < n
    if n > 1:
        assert stats.chisquare(np.bincount(draws, minlength=n)).pvalue > P_MIN


# --- RandomFrames: epochs, uniformity, reproducibility ---------------------------------------

@pytest.mark.parametrize("batch_size", [1, 7, 64, TOTAL, 1000])
def test_epoch_without_replacement_is_a_permutation_of_all_frames(index, batch_size):
    batches = all_batches(RandomFrames(seed=3), index, batch_size=batch_size)
    assert len(batches) == -(-TOTAL // batch_size)
    assert all(b.batch_size == batch_size for b in batches[:-1])
    assert all(b.frame_indices.shape == (b.batch_size, 1) and not b.is_clip for b in batches)
    for b in batches:
        assert (b.frame_indices[:, 0] < np.asarray(FRAME_COUNTS)[b.video_indices]).all()
    np.testing.assert_array_equal(np.sort(frame_ids(batches)), np.arange(TOTAL))


@pytest.mark.parametrize("batch_size", [1, 7, 64, TOTAL])
def test_drop_last_keeps_full_batches_of_the_same_order(index, batch_size):
    sampler = RandomFrames(seed=3)
    batches = all_batches(sampler, index, batch_size=batch_size, drop_last=True)
    assert len(batches) == TOTAL // batch_size
    assert all(b.batch_size == batch_size for b in batches)
    ids = frame_ids(batches)
    assert len(np.unique(ids)) == len(ids)
    order = frame_ids(all_batches(sampler, index, batch_size=1))
    np.testing.assert_array_equal(ids, order[: len(ids)])


def test_frames_are_uniform_across_epochs_without_replacement(index):
    sampler = RandomFrames(seed=11)
    heads = [sampler.plan_epoch(index, epoch=e, batch_size=16).batch(0) for e in range(2000)]
    counts = np.bincount(frame_ids(heads), minlength=TOTAL)
    assert stats.chisquare(counts).pvalue > P_MIN
    _assert_video_shares_follow_frame_counts(np.concatenate([b.video_indices for b in heads]))


def test_frames_are_uniform_with_replacement(index):
    batches = all_batches(
        RandomFrames(replacement=True, num_samples=TOTAL * 100, seed=5), index, batch_size=4096
    )
    ids = frame_ids(batches)
    assert len(ids) == TOTAL * 100
    assert stats.chisquare(np.bincount(ids, minlength=TOTAL)).pvalue > P_MIN
    _assert_video_shares_follow_frame_counts(np.concatenate([b.video_indices for b in batches]))


def _assert_video_shares_follow_frame_counts(videos):
    counts = np.bincount(videos, minlength=len(FRAME_COUNTS))
    weights = np.asarray(FRAME_COUNTS) / TOTAL
    assert stats.chisquare(counts, weights * counts.sum()).pvalue > P_MIN
    # Per-frame uniformity is NOT per-video uniformity: that hypothesis is rejected outright.
    assert stats.chisquare(counts).pvalue < 1e-12
    assert counts[0] < 0.01 * counts.sum() < counts[4] / 50


def test_with_replacement_repeats_frames(index):
    ids = frame_ids(all_batches(RandomFrames(replacement=True, seed=1), index))
    assert len(ids) == TOTAL  # default num_samples: all frames
    assert 0.5 * TOTAL < len(np.unique(ids)) < 0.75 * TOTAL  # expected 1 - 1/e = 63 %


SAMPLERS = {
    "random": lambda seed: RandomFrames(seed=seed),
    "replacement": lambda seed: RandomFrames(replacement=True, seed=seed),
    "clips": lambda seed: Clips(sequence_length=3, stride=2, step=2, seed=seed),
    "clips-replacement": lambda seed: Clips(sequence_length=4, replacement=True, seed=seed),
}


@pytest.mark.parametrize("kind", SAMPLERS)
def test_same_seed_same_stream_and_epochs_differ(index, kind):
    def stream(seed, epoch):
        return by_position(SAMPLERS[kind](seed), index, epoch=epoch, batch_size=10)

    assert stream(7, 0) == stream(7, 0)
    assert stream(7, 0) != stream(7, 1)
    assert stream(7, 0) != stream(8, 0)


@pytest.mark.parametrize("kind", SAMPLERS)
def test_batches_out_of_order_equal_batches_in_order(index, kind):
    plan = SAMPLERS[kind](0).plan_epoch(index, epoch=2, batch_size=9)
    in_order = list(plan)
    for b in (5, 0, len(plan) - 1, 3):
        batch = plan.batch(b)
        assert batch.batch_index == b and batch.epoch == 2
        np.testing.assert_array_equal(batch.video_indices, in_order[b].video_indices)
        np.testing.assert_array_equal(batch.frame_indices, in_order[b].frame_indices)
        np.testing.assert_array_equal(batch.sample_seeds, in_order[b].sample_seeds)


@pytest.mark.parametrize("kind", SAMPLERS)
def test_stream_does_not_depend_on_batch_size_or_world_size(index, kind):
    sampler = SAMPLERS[kind](4)
    reference = by_position(sampler, index, batch_size=1)
    assert sorted(reference) == list(range(len(reference)))
    for batch_size in (13, 128):
        assert by_position(sampler, index, batch_size=batch_size) == reference
    for world in (2, 3, 4):
        for rank in range(world):
            shard = by_position(sampler, index, batch_size=5, rank=rank, world_size=world)
            assert all(reference[p] == v for p, v in shard.items())


def test_sample_seeds_are_per_position_and_per_epoch(index):
    sampler = RandomFrames(seed=2)
    seeds0 = np.concatenate([b.sample_seeds for b in all_batches(sampler, index, epoch=0)])
    seeds1 = np.concatenate([b.sample_seeds for b in all_batches(sampler, index, epoch=1)])
    assert seeds0.dtype == np.uint64
    assert len(np.unique(seeds0)) == TOTAL
    assert not np.intersect1d(seeds0, seeds1).size
    # The sequential sampler's seeds depend on its seed and the epoch, not on the order.
    seq = np.concatenate([b.sample_seeds for b in all_batches(SequentialFrames(seed=2), index)])
    np.testing.assert_array_equal(seq, seeds0)


# --- distribution over ranks ------------------------------------------------------------------

def _rank_streams(sampler, index, world, drop_last, batch_size=8):
    plans = [
        sampler.plan_epoch(index, epoch=1, batch_size=batch_size, rank=r, world_size=world,
                           drop_last=drop_last)
        for r in range(world)
    ]
    assert len({len(p) for p in plans}) == 1  # every rank runs the same number of batches
    return [frame_ids(list(p)) for p in plans]


@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_ranks_partition_an_epoch_exactly_when_divisible(index, world):
    sampler = RandomFrames(num_samples=384, seed=6)  # 384 is divisible by 1, 2, 3 and 4
    epoch = frame_ids(all_batches(sampler, index, epoch=1, batch_size=1))
    for drop_last in (False, True):
        streams = _rank_streams(sampler, index, world, drop_last)
        assert {len(s) for s in streams} == {384 // world}
        union = np.concatenate(streams)
        np.testing.assert_array_equal(np.sort(union), np.sort(epoch))
        assert len(np.unique(union)) == 384


@pytest.mark.parametrize("world", [2, 3, 4])
def test_ranks_pad_by_wrapping_when_not_divisible(index, world):
    sampler = RandomFrames(seed=6)
    order = frame_ids(all_batches(sampler, index, epoch=1, batch_size=1))
    streams = _rank_streams(sampler, index, world, drop_last=False)
    per_rank = -(-TOTAL // world)
    assert {len(s) for s in streams} == {per_rank}
    union = np.concatenate(streams)
    np.testing.assert_array_equal(np.unique(union), np.arange(TOTAL))
    padding = per_rank * world - TOTAL
    values, counts = np.unique(union, return_counts=True)
    np.testing.assert_array_equal(np.sort(values[counts == 2]), np.sort(order[:padding]))
    assert counts.max() <= 2


@pytest.mark.parametrize("world", [2, 3, 4])
def test_drop_last_gives_disjoint_equal_shards(index, world):
    sampler = RandomFrames(seed=6)
    order = frame_ids(all_batches(sampler, index, epoch=1, batch_size=1))
    streams = _rank_streams(sampler, index, world, drop_last=True, batch_size=1)
    assert {len(s) for s in streams} == {TOTAL // world}
    union = np.concatenate(streams)
    assert len(np.unique(union)) == len(union)
    np.testing.assert_array_equal(np.sort(union), np.sort(order[: TOTAL // world * world]))


@pytest.mark.parametrize("world", [2, 3, 4])
@pytest.mark.parametrize("drop_last", [False, True])
def test_sequential_ranks_take_contiguous_blocks(index, world, drop_last):
    """Interleaved, each rank decoded every frame of the same GOPs to deliver every other one
    (1.65 decoded per delivered frame on 2 ranks); in blocks, each decodes only its own."""
    order = frame_ids(all_batches(SequentialFrames(), index, epoch=1, batch_size=1))
    streams = _rank_streams(SequentialFrames(), index, world, drop_last=drop_last, batch_size=7)
    per_rank = TOTAL // world if drop_last else -(-TOTAL // world)
    delivered = per_rank // 7 * 7 if drop_last else per_rank  # drop_last: whole batches only
    for r, stream in enumerate(streams):
        want = np.arange(r * per_rank, r * per_rank + delivered) % TOTAL
        np.testing.assert_array_equal(stream, order[want])
    union = np.concatenate(streams)
    if drop_last:
        assert len(np.unique(union)) == len(union)
    else:
        np.testing.assert_array_equal(np.unique(union), np.sort(order))


def test_more_ranks_than_samples_still_gives_every_rank_a_batch(index):
    plans = [RandomFrames(num_samples=3).plan_epoch(index, epoch=0, batch_size=4, rank=r,
                                                    world_size=5) for r in range(5)]
    assert [len(p) for p in plans] == [1] * 5
    assert all(p.batch(0).batch_size == 1 for p in plans)


# --- sequential frames and clips --------------------------------------------------------------

def test_sequential_frames_follow_the_stream(index):
    batches = all_batches(SequentialFrames(), index, batch_size=50)
    videos = np.concatenate([b.video_indices for b in batches])
    frames = np.concatenate([b.frame_indices[:, 0] for b in batches])
    np.testing.assert_array_equal(videos, np.repeat(np.arange(6), FRAME_COUNTS))
    np.testing.assert_array_equal(frames, np.concatenate([np.arange(n) for n in FRAME_COUNTS]))
    head = all_batches(SequentialFrames(num_samples=10), index, epoch=3, batch_size=4)
    np.testing.assert_array_equal(frame_ids(head), np.arange(10))


def test_nvvl_example_two_videos_of_100_frames():
    two = make_index([100, 100])
    sampler = Clips(sequence_length=5, shuffle=False)
    assert sampler.num_samples(two) == 192
    batches = all_batches(sampler, two, batch_size=32)
    videos = np.concatenate([b.video_indices for b in batches])
    frames = np.concatenate([b.frame_indices for b in batches])
    np.testing.assert_array_equal(videos, np.repeat([0, 1], 96))
    starts = np.tile(np.arange(96), 2)
    np.testing.assert_array_equal(frames, starts[:, None] + np.arange(5))
    assert all(b.is_clip and b.sequence_length == 5 for b in batches)


def _expected_clips(counts, length, stride, step):
    return [
        (v, tuple(range(s, s + stride * length, stride)))
        for v, n in enumerate(counts)
        for s in range(0, n, step)
        if s + stride * (length - 1) < n
    ]


def _clip_list(batches):
    return [
        (int(v), tuple(int(f) for f in fs))
        for b in batches for v, fs in zip(b.video_indices, b.frame_indices, strict=True)
    ]


@pytest.mark.parametrize(
    "length, stride, step", [(1, 1, 1), (5, 1, 1), (3, 2, 1), (4, 3, 5), (2, 1, 3), (8, 4, 2)]
)
def test_clips_enumerate_every_start_and_never_cross_a_video_end(index, length, stride, step):
    expected = _expected_clips(FRAME_COUNTS, length, stride, step)
    ordered = Clips(sequence_length=length, stride=stride, step=step, shuffle=False)
    assert ordered.num_samples(index) == len(expected)
    assert _clip_list(all_batches(ordered, index, batch_size=7)) == expected
    shuffled = Clips(sequence_length=length, stride=stride, step=step, seed=1)
    got = _clip_list(all_batches(shuffled, index, batch_size=7))
    assert sorted(got) == expected and got != expected
    assert all(max(fs) < FRAME_COUNTS[v] for v, fs in got)


def test_short_videos_have_no_clips():
    batches = all_batches(Clips(sequence_length=5, stride=2), make_index([3, 8, 20, 0]), epoch=0)
    videos = np.concatenate([b.video_indices for b in batches])
    assert set(videos.tolist()) == {2}  # 8 < 2 * (5 - 1) + 1 = 9 frames
    assert len(videos) == 20 - 9 + 1


def test_an_index_without_any_clip_is_a_config_error(index):
    with pytest.raises(ConfigError, match=r"sequence_length=50.*stride=6.*295 frames.*has 250"):
        Clips(sequence_length=50, stride=6).plan_epoch(index, epoch=0, batch_size=4)
    with pytest.raises(ConfigError, match="no videos"):
        RandomFrames().num_samples(make_index([]))
    with pytest.raises(ConfigError, match="no frames"):
        RandomFrames().num_samples(make_index([0, 0]))


@pytest.mark.parametrize("replacement", [False, True])
def test_clips_of_one_frame_are_random_frames(index, replacement):
    frames = RandomFrames(replacement=replacement, seed=9)
    clips = Clips(sequence_length=1, replacement=replacement, seed=9)
    assert by_position(frames, index, epoch=4, batch_size=32) == by_position(
        clips, index, epoch=4, batch_size=32
    )


# --- options and errors -----------------------------------------------------------------------

def test_num_samples(index):
    sub = frame_ids(all_batches(RandomFrames(num_samples=100, seed=1), index))
    assert len(sub) == 100 == len(np.unique(sub))
    assert RandomFrames(replacement=True, num_samples=1000).num_samples(index) == 1000
    with pytest.raises(ConfigError, match=r"num_samples=400.*391.*replacement=True"):
        RandomFrames(num_samples=400).plan_epoch(index, epoch=0, batch_size=8)


@pytest.mark.parametrize("make", [
    lambda: Clips(sequence_length=0),
    lambda: Clips(sequence_length=2, stride=0),
    lambda: Clips(sequence_length=2, step=0),
    lambda: Clips(sequence_length=2, shuffle=False, replacement=True),
    lambda: Clips(sequence_length=2.0),
    lambda: RandomFrames(num_samples=0),
    lambda: RandomFrames(seed="1"),
    lambda: RandomFrames(replacement="yes"),
    lambda: SequentialFrames(num_samples=-1),
])
def test_bad_options_are_config_errors(make):
    with pytest.raises(ConfigError):
        make()


@pytest.mark.parametrize("kwargs", [
    dict(epoch=0, batch_size=0),
    dict(epoch=-1, batch_size=4),
    dict(epoch=0, batch_size=4, rank=4, world_size=4),
    dict(epoch=0, batch_size=4, world_size=0),
    dict(epoch=0, batch_size=True),
    dict(epoch=0, batch_size=400, drop_last=True),
])
def test_bad_plan_arguments_are_config_errors(index, kwargs):
    with pytest.raises(ConfigError):
        RandomFrames().plan_epoch(index, **kwargs)


def test_batch_number_out_of_range(index):
    plan = RandomFrames().plan_epoch(index, epoch=0, batch_size=100)
    assert len(plan) == 4 and plan.batch(3).batch_size == TOTAL - 300
    for bad in (4, -1):
        with pytest.raises(IndexError, match="4 batches"):
            plan.batch(bad)


def test_samplers_and_plans_survive_pickling(index):
    # Spawned workers receive samplers (or plans) by pickle: they must compute the same batches.
    sampler = Clips(sequence_length=3, stride=2, seed=5)
    plan = sampler.plan_epoch(index, epoch=1, batch_size=8)
    for copy in (pickle.loads(pickle.dumps(plan)),
                 pickle.loads(pickle.dumps(sampler)).plan_epoch(index, epoch=1, batch_size=8)):
        np.testing.assert_array_equal(copy.batch(3).frame_indices, plan.batch(3).frame_indices)
        np.testing.assert_array_equal(copy.batch(3).sample_seeds, plan.batch(3).sample_seeds)


def test_config_is_json_and_names_every_option():
    for sampler in (RandomFrames(num_samples=5, seed=2), SequentialFrames(),
                    Clips(sequence_length=4, stride=2, step=3, shuffle=False)):
        config = json.loads(json.dumps(sampler.config()))
        assert config["type"] == type(sampler).__name__ and "num_samples" in config
    assert Clips(sequence_length=4).config() == {
        "type": "Clips", "seed": 0, "sequence_length": 4, "stride": 1, "step": 1,
        "shuffle": True, "replacement": False, "num_samples": None,
    }  # first_seconds only when set: states saved before it existed still resume
    assert "sequence_length=4" in repr(Clips(sequence_length=4))


# --- labels and rank detection ------------------------------------------------------------------

def test_labels_from_sequence_mapping_and_callable(index):
    expected = np.arange(6, dtype=np.int64) * 10
    for labels in (list(expected), expected.astype(np.int32), tuple(int(x) for x in expected)):
        got = resolve_labels(index, labels)
        assert got.dtype == np.int64
        np.testing.assert_array_equal(got, expected)
    by_path = {f"/data/video_{k}.mp4": 10 * k for k in range(7)}  # extra keys are fine
    np.testing.assert_array_equal(resolve_labels(index, by_path), expected)
    np.testing.assert_array_equal(
        resolve_labels(index, lambda p: int(p.split("_")[1].split(".")[0]) * 10), expected
    )
    assert resolve_labels(index, None) is None


def test_bad_labels_are_config_errors(index):
    with pytest.raises(ConfigError, match=r"5 entries.*6 videos"):
        resolve_labels(index, [0] * 5)
    with pytest.raises(ConfigError, match=r"1 of 6 videos.*video_5"):
        resolve_labels(index, {f"/data/video_{k}.mp4": k for k in range(5)})
    with pytest.raises(ConfigError, match=r"2.5.*position 3"):
        resolve_labels(index, [0, 1, 2, 2.5, 4, 5])
    with pytest.raises(ConfigError, match="video_0"):
        resolve_labels(index, lambda path: "cat")
    with pytest.raises(ConfigError):
        resolve_labels(index, "012345")


def test_detect_rank_world(monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert detect_rank_world() == (0, 1)
    monkeypatch.setenv("RANK", "2")
    with pytest.raises(ConfigError, match="WORLD_SIZE is not set"):
        detect_rank_world()
    monkeypatch.setenv("WORLD_SIZE", "4")
    assert detect_rank_world() == (2, 4)
    monkeypatch.setenv("RANK", "4")
    with pytest.raises(ConfigError, match="rank 4 with world_size 4"):
        detect_rank_world()
    monkeypatch.setenv("RANK", "two")
    with pytest.raises(ConfigError, match="RANK='two'"):
        detect_rank_world()


def test_public_names():
    assert sampling.__all__ == sorted(sampling.__all__)
    assert set(sampling.__all__) == {
        "BatchPlan", "Clips", "EpochPlan", "GopShuffle", "MultiCameraClips",
        "MultiCameraEpoch", "RandomFrames", "Sampler", "SequentialFrames", "detect_rank_world",
        "resolve_labels",
    }
    # The analysis moved to its own layer; its public names still resolve from sampling.
    from vidloader import analysis

    moved = {"IccEstimate", "SamplingReport", "estimate_intra_gop_correlation",
             "intraclass_correlation", "sampling_report"}
    assert moved <= set(analysis.__all__)
    for name in moved:
        assert getattr(sampling, name) is getattr(analysis, name)


# --- scale ------------------------------------------------------------------------------------

@pytest.mark.parametrize("sampler", [
    RandomFrames(seed=1),
    RandomFrames(replacement=True, seed=1),
    Clips(sequence_length=16, stride=2, seed=1),
], ids=["random", "replacement", "clips"])
def test_a_million_videos_plan_fast(sampler):
    huge = ArrayIndex(np.full(1_000_000, 300))  # 3e8 frames; samplers use only num_frames
    start = time.perf_counter()
    plan = sampler.plan_epoch(huge, epoch=3, batch_size=128, rank=1, world_size=8)
    assert time.perf_counter() - start < 1.0
    times = []
    for b in (0, 123_456, len(plan) - 1, 7, 99_999):
        start = time.perf_counter()
        batch = plan.batch(b)
        times.append(time.perf_counter() - start)
    assert np.median(times) < 0.010
    assert batch.batch_size == 128 and batch.video_indices.max() < 1_000_000
    assert (batch.frame_indices < 300).all()


# --- block computation: plans computed a block of batches at a time --------------------------
# The reference below recomputes every sample from its definition, one Python integer at a
# time: no numpy, no block, no table, so nothing it shares with the plan can hide a mismatch.

def reference_image(n: int, key: int, x: int) -> int:
    """KeyedPermutation(n, key) at ``x``: its Feistel network and cycle-walk, scalar."""
    bits = max(2, (n - 1).bit_length())
    lo_bits = bits // 2
    lo_mask, hi_mask = (1 << lo_bits) - 1, (1 << (bits - lo_bits)) - 1
    keys = [derive_seed(key, r) for r in range(feistel_rounds(bits))]
    while True:
        lo, hi = x & lo_mask, x >> lo_bits
        for r, round_key in enumerate(keys):
            if r % 2 == 0:
                hi ^= mix64(lo + round_key) & hi_mask
            else:
                lo ^= mix64(hi + round_key) & lo_mask
        x = (hi << lo_bits) | lo
        if x < n:
            return x


def reference_stream(key: int, c: int) -> int:
    """counter_stream(key, [c]), scalar."""
    return mix64(key + (c + 1) * GOLDEN)


def reference_draw(key: int, c: int, n: int) -> int:
    """uniform_below(key, [c], n), scalar: redrawn from derived streams above the limit."""
    limit, value, attempt = ((1 << 64) // n) * n, reference_stream(key, c), 0
    while value >= limit:
        attempt += 1
        value = reference_stream(derive_seed(key, attempt), c)
    return value % n


def reference_plan(sampler, index, b, *, epoch, batch_size, rank, world_size, drop_last):
    """(videos, frames, seeds) of batch ``b`` from the sampling laws alone."""
    shape = sampler._clip_shape()
    counts = [max(0, (int(f) - shape.span) // shape.step + 1) for f in index.num_frames]
    offsets = [0, *itertools.accumulate(counts)]
    total = sampler.num_samples(index)
    share = total // world_size if drop_last else -(-total // world_size)
    mode = sampler.epoch_order
    seed = sampler.seed
    rows = []
    for local in range(b * batch_size, min((b + 1) * batch_size, share)):
        p = (rank * share + local) % total if mode == "sequential" else (rank + local * world_size) % total
        if mode == "sequential":
            sample = p
        elif mode == "shuffle":
            sample = reference_image(offsets[-1], derive_seed(seed, epoch, _epoch._SHUFFLE_TAG), p)
        else:
            sample = reference_draw(derive_seed(seed, epoch, _epoch._DRAW_TAG), p, offsets[-1])
        video = bisect.bisect_right(offsets, sample) - 1
        start = (sample - offsets[video]) * shape.step
        rows.append((video, [start + shape.stride * t for t in range(shape.length)],
                     reference_stream(derive_seed(seed, epoch, _epoch._SAMPLE_SEED_TAG), p)))
    videos, frames, seeds = zip(*rows)
    return (np.array(videos, np.int64), np.array(frames, np.int64),
            np.array(seeds, np.uint64))


def assert_plan_is_reference(got, want, b):
    assert got.batch_index == b
    for field, expected in zip(("video_indices", "frame_indices", "sample_seeds"), want):
        value = getattr(got, field)
        assert value.dtype == expected.dtype and np.array_equal(value, expected), (b, field)


BLOCK_SAMPLERS = {
    "shuffle": RandomFrames(seed=3),
    "sequential": SequentialFrames(seed=4),
    "replacement": RandomFrames(seed=3, num_samples=701, replacement=True),
    "truncated": RandomFrames(seed=6, num_samples=701),
    "clips": Clips(seed=5, sequence_length=4, stride=2, step=3),
    "sequential-clips": Clips(seed=5, sequence_length=3, stride=2, shuffle=False),
    "equal-videos": RandomFrames(seed=7),  # run on videos of one length: located by division
}


@pytest.mark.parametrize("name", list(BLOCK_SAMPLERS))
@pytest.mark.parametrize("rank, world, drop_last",
                         [(0, 1, False), (0, 1, True), (1, 3, False), (2, 3, True)])
def test_plans_computed_a_block_at_a_time_equal_the_sampling_laws(
        monkeypatch, name, rank, world, drop_last):
    """An epoch plan computes its batches a block at a time and keeps the last block; in any
    order of access (forwards, backwards, across block boundaries, jumping, resuming in the
    middle of a block, the same batch twice) every batch is the one the laws define."""
    sampler = BLOCK_SAMPLERS[name]
    args = dict(epoch=2, batch_size=7, rank=rank, world_size=world, drop_last=drop_last)
    monkeypatch.setattr(_epoch, "BLOCK_SAMPLES", 50)  # blocks of 7 batches
    per_block = 7
    for videos in range(40, 100):  # the first index whose epoch has both short ends
        frames = np.random.default_rng(videos).integers(0, 60, videos)
        index = ArrayIndex(np.full(videos, 40) if name == "equal-videos" else frames)
        plan = sampler.plan_epoch(index, **args)
        n = len(plan)
        # A short last block, and a short last batch unless drop_last drops it.
        if n > 4 * per_block and n % per_block and (drop_last or plan.num_samples % 7):
            break
    else:
        pytest.fail("no index of 40 to 99 videos gives an epoch with a short last block")
    boundaries = [k for b in range(per_block, n, per_block) for k in (b - 1, b, b - 1)]
    order = [17, 16, 3, n - 1, 0, n - 2, *boundaries, 9, 9, *range(n), *reversed(range(n))]
    want = {b: reference_plan(sampler, index, b, **args) for b in range(n)}
    for b in order:
        assert_plan_is_reference(plan.batch(b), want[b], b)
        first, kept = plan._block
        assert first % per_block == 0 and first <= b < first + len(kept) <= first + per_block
    assert plan.batch(n - 1).batch_size == (7 if drop_last else plan.num_samples - 7 * (n - 1))
    with pytest.raises(IndexError):
        plan.batch(n)
    with pytest.raises(IndexError):
        plan.batch(-1)


@pytest.mark.parametrize("block_samples", [1, 6, 7, 8192])
def test_block_size_in_batches_is_at_least_one_and_at_most_the_epoch(monkeypatch, block_samples):
    """Blocks hold ``BLOCK_SAMPLES // batch_size`` batches, at least one (batches larger than
    a block) and never past the end of the epoch; plans are the same whatever the size."""
    index = ArrayIndex(np.random.default_rng(1).integers(1, 60, 30))
    sampler = RandomFrames(seed=11)
    args = dict(epoch=0, batch_size=7, rank=1, world_size=2, drop_last=False)
    monkeypatch.setattr(_epoch, "BLOCK_SAMPLES", block_samples)
    plan = sampler.plan_epoch(index, **args)
    n = len(plan)
    for b in [n - 1, *range(n)]:
        assert_plan_is_reference(plan.batch(b), reference_plan(sampler, index, b, **args), b)
        assert len(plan._block[1]) == min(max(1, block_samples // 7), n - plan._block[0])


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 7, 8, 9, 255, 256, 257, 1000, 2**12 + 1,
                               2**16 - 1, 2**16 + 1, 2**20 + 3])
def test_permutation_tables_give_the_network_s_bits(n):
    """A permutation evaluates directly until it has evaluated a row of its round tables'
    worth of points, then through the tables: both give each position the scalar network's image,
    however the positions are split into calls (the cycle-walk is per position)."""
    key = derive_seed(n, 5)
    perm = KeyedPermutation(n, key)
    x = np.random.default_rng(n).integers(0, n, 2 * perm._tabulate_after + 64)
    first, rest = x[:64], x[64:]
    direct = perm(first)  # below the threshold: no tables yet, unless they are that small
    assert (perm._tables is None) == (perm._tabulate_after > 64)
    tabulated = perm(rest)  # crosses the threshold: built on entry
    assert perm._tables is not None
    assert np.array_equal(perm(first), direct)
    for points, images in ((first, direct), (rest[-256:], tabulated[-256:]), ([0, n - 1], None)):
        want = [reference_image(n, key, int(p)) for p in points]
        assert np.array_equal(perm(np.asarray(points)) if images is None else images, want)


def test_permutations_of_huge_domains_are_never_tabulated():
    n = 2**31 + 11  # halves of 16 bits: tables of 2**16 entries a round, over the cap
    perm = KeyedPermutation(n, 3)
    x = np.random.default_rng(0).integers(0, n, 4096)
    for _ in range(4):
        images = perm(x)
    assert perm._tables is None and perm._tabulate_after is None
    assert images.dtype == np.int64
    assert np.array_equal(images[:50], [reference_image(n, 3, int(p)) for p in x[:50]])


@pytest.mark.parametrize("frames, shape", [
    (np.ones(1000, np.int64), ClipShape()),  # an image dataset: one sample per video
    (np.full(40, 30), ClipShape()),
    (np.full(40, 30), ClipShape(length=4, stride=3, step=2)),
    (np.array([30, 31, 29, 30]), ClipShape(length=4, stride=3, step=2)),  # equal counts too
    (np.array([30, 0, 30]), ClipShape()),  # an empty video: not uniform
])
def test_locating_by_division_equals_the_binary_search(frames, shape):
    space = SampleSpace(frames, shape)
    ids = np.random.default_rng(0).permutation(space.size)
    videos, starts = space.locate(ids)
    want_videos = np.searchsorted(space.offsets, ids, side="right") - 1
    want_starts = (ids - space.offsets[want_videos]) * shape.step
    assert videos.dtype == np.int64 and np.array_equal(videos, want_videos)
    assert np.array_equal(starts, want_starts[:, None] + shape.stride * np.arange(shape.length))
