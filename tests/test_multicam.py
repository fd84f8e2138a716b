"""MultiCameraClips: the same frames from every camera of a rig, with the sampling laws of the
other samplers, end to end through the loader on generated video."""

from __future__ import annotations

import collections
import dataclasses
import os
from pathlib import Path

import numpy as np
import pytest
import torch

import vidloader
from vidloader import ConfigError, MultiCameraClips, VideoLoader
from vidloader.synthetic import VideoSpec, make_dataset

from .media import collect_batches, reference_frames, resumed_stream

CAMERAS = 3
#: Two rigs of three cameras; the cameras of a rig differ by a frame (the shortest counts).
LENGTHS = [[12, 13, 12], [9, 9, 10]]


class _Lengths:
    """An index stand-in: samplers read only ``num_frames`` and ``len``."""

    def __init__(self, num_frames) -> None:
        self.num_frames = np.asarray(num_frames, np.int64)

    def __len__(self) -> int:
        return len(self.num_frames)


class _Record:
    """A record stand-in for the stream units: keyframes and length."""

    def __init__(self, keyframes, frames) -> None:
        self.keyframes, self.num_frames = np.asarray(keyframes, np.int64), frames

    def keyframe_before(self, f):
        return self.keyframes[np.searchsorted(self.keyframes, f, side="right") - 1]

    def check_frames(self, f) -> None:
        from vidloader.errors import FrameIndexError

        if not 0 <= f < self.num_frames:
            raise FrameIndexError(f"frame {f} of {self.num_frames}")


RIGS = [[0, 1, 2], [3, 4, 5]]
INDEX = _Lengths(np.ravel(LENGTHS))


@pytest.fixture(scope="module")
def rigs(tmp_path_factory):
    root = tmp_path_factory.mktemp("multicam")
    specs = [VideoSpec(width=64, height=48, num_frames=n, gop=5, bframes=2, seed=10 * r + c)
             for r, rig in enumerate(LENGTHS) for c, n in enumerate(rig)]
    paths = make_dataset(root, specs, num_workers=1)
    index = vidloader.build_index(paths, num_workers=0, progress=False)
    return index, [[index.paths.index(os.path.abspath(p)) for p in paths[3 * r: 3 * r + 3]]
                   for r in range(2)]


def _samples(plan) -> list[tuple[int, int]]:
    """(rig's first video, frame) per sample, checking that each sample's rows agree."""
    out = []
    for bp in plan:
        videos = bp.video_indices.reshape(-1, CAMERAS)
        frames = bp.frame_indices.reshape(-1, CAMERAS, bp.frame_indices.shape[1])
        seeds = bp.sample_seeds.reshape(-1, CAMERAS)
        assert all(list(v) in RIGS for v in videos.tolist())
        assert (frames == frames[:, :1]).all() and (seeds == seeds[:, :1]).all()
        out += list(zip(videos[:, 0].tolist(), frames[:, 0, 0].tolist()))
    return out


def test_every_rig_frame_once_per_epoch_sharded_over_ranks():
    every = {(rig[0], f) for rig, lengths in zip(RIGS, LENGTHS) for f in range(min(lengths))}
    sampler = MultiCameraClips(RIGS, seed=3)
    one = _samples(sampler.plan_epoch(INDEX, epoch=0, batch_size=4))
    assert sorted(one) == sorted(every)  # each (rig, frame) exactly once
    assert one != sorted(one)  # shuffled
    assert _samples(sampler.plan_epoch(INDEX, epoch=1, batch_size=4)) != one
    ranks = [_samples(sampler.plan_epoch(INDEX, epoch=0, batch_size=2, rank=r, world_size=3,
                                         drop_last=True)) for r in range(3)]
    flat = [s for r in ranks for s in r]
    assert len(flat) == len(set(flat)) == 3 * (len(every) // 3 // 2) * 2


def test_in_order_and_clips():
    plan = MultiCameraClips(RIGS, sequence_length=3, stride=2, shuffle=False).plan_epoch(
        INDEX, epoch=0, batch_size=5)
    bp = plan.batch(0)
    assert bp.is_clip and bp.frame_indices.shape == (5 * CAMERAS, 3)
    np.testing.assert_array_equal(bp.frame_indices[:CAMERAS], [[0, 2, 4]] * CAMERAS)
    assert len(_samples(plan)) == (12 - 4) + (9 - 4)  # starts whose clip fits the shortest camera


@pytest.mark.parametrize("rigs, match", [
    ([], "at least one rig"), ([[0, 1], [2]], "same length"), ([[0, -1]], ">= 0"),
])
def test_bad_rigs_are_refused(rigs, match):
    with pytest.raises(ConfigError, match=match):
        MultiCameraClips(rigs)


def test_a_rig_outside_the_index_is_named():
    with pytest.raises(ConfigError, match="names video 9"):
        MultiCameraClips([[0, 9]]).plan_epoch(INDEX, epoch=0, batch_size=2)


@pytest.mark.parametrize("workers", [0, 2])
def test_loader_gives_every_camera_of_a_sample_exactly(rigs, workers):
    index, rig_ids = rigs
    refs = {v: reference_frames(index[v].path) for rig in rig_ids for v in rig}
    loader = VideoLoader(index, sampler=MultiCameraClips(rig_ids, seed=1), batch_size=4,
                         num_workers=workers)
    seen = collections.Counter()
    for batch in collect_batches(loader):
        frames, videos, indices = batch["frames"], batch["video_index"], batch["frame_index"]
        assert frames.shape[1:] == (CAMERAS, 48, 64, 3) and videos.shape[1:] == (CAMERAS,)
        for sample in range(len(frames)):
            assert videos[sample].tolist() in rig_ids
            assert len(set(indices[sample].tolist())) == 1  # one instant, every camera
            for cam in range(CAMERAS):
                v, f = int(videos[sample, cam]), int(indices[sample, cam])
                np.testing.assert_array_equal(frames[sample, cam].numpy(), refs[v][f])
            seen[(int(videos[sample, 0]), int(indices[sample, 0]))] += 1
    assert set(seen.values()) == {1} and len(seen) == 12 + 9


def test_loader_clips_have_a_camera_and_a_time_axis(rigs):
    index, rig_ids = rigs
    loader = VideoLoader(index, sampler=MultiCameraClips(rig_ids, sequence_length=4, seed=2),
                         batch_size=3, size=(24, 32), num_workers=0)
    batch = next(iter(loader))
    assert batch["frames"].shape == (3, CAMERAS, 4, 24, 32, 3)
    assert batch["frame_index"].shape == (3, CAMERAS, 4)


def test_a_bad_camera_file_drops_its_samples_whole(rigs, tmp_path):
    index, rig_ids = rigs
    bad = index[rig_ids[1][2]].path
    broken = tmp_path / "broken.mp4"
    data = bytearray(Path(bad).read_bytes())
    mdat = data.find(b"mdat")
    data[mdat + 8:] = os.urandom(len(data) - mdat - 8)  # header kept, pictures ruined
    broken.write_bytes(bytes(data))
    records = list(index)
    records[rig_ids[1][2]] = dataclasses.replace(records[rig_ids[1][2]], path=str(broken))
    damaged = vidloader.VideoIndex(records)
    loader = VideoLoader(damaged, sampler=MultiCameraClips(rig_ids, seed=1), batch_size=4,
                         num_workers=0, on_error="skip")
    batches = collect_batches(loader)
    videos = torch.cat([b["video_index"] for b in batches])
    assert videos.shape[1:] == (CAMERAS,)
    assert sorted(set(videos[:, 0].tolist())) == [rig_ids[0][0]]  # rig 1 dropped, rig 0 whole
    assert len(videos) == 12 and loader.stats["skipped_samples"] == 9  # samples, not rows
    assert loader.stats["samples"] == 12
    assert str(broken) in loader.stats["skipped_files"]


def test_sampling_report_says_it_does_not_measure_rigs():
    from vidloader.analysis import sampling_report

    with pytest.raises(ConfigError, match="rigs of cameras"):
        sampling_report(MultiCameraClips(RIGS), INDEX, batch_size=2)


def test_resume_mid_epoch_continues_identically_and_refuses_other_rigs(rigs):
    index, rig_ids = rigs

    def make(sampler_rigs=rig_ids):
        return VideoLoader(index, sampler=MultiCameraClips(sampler_rigs, seed=7), batch_size=3,
                           size=(24, 32), num_workers=0)

    stream, full, state = resumed_stream(make, after=2)
    assert len(stream) == len(full)
    for a, b in zip(stream, full):
        assert torch.equal(a["frames"], b["frames"]) and torch.equal(a["video_index"], b["video_index"])
    with pytest.raises(ConfigError):
        make(rig_ids[::-1]).load_state_dict(state)  # other rigs: another stream


def test_streams_walk_each_row_through_its_video_and_decode_each_frame_once(rigs):
    """``streams=True``, the separation example's stream order: the in-order samples cut into
    ``batch_size`` runs, batch ``i`` holding sample ``i`` of each, so each row walks one
    video frame by frame; on CPU workers each frame is decoded about once, and the frames
    are the reference decode's. It needs ``shuffle=False``."""
    index, rig_positions = rigs
    with pytest.raises(ConfigError, match="shuffle=False"):
        MultiCameraClips(rig_positions, streams=True)
    sampler = MultiCameraClips(rig_positions, shuffle=False, streams=True)
    plan = sampler.plan_epoch(index, epoch=0, batch_size=2)
    total = sampler.num_samples(index)  # 12 + 9 samples in order; 2 runs of 10
    assert len(plan) == total // 2 and sampler.config()["streams"] is True
    b0, b1 = plan.batch(0), plan.batch(1)
    assert np.array_equal(b1.frame_indices, b0.frame_indices + 1)  # each row: the next frame
    assert np.array_equal(b1.video_indices, b0.video_indices)
    loader = VideoLoader(index, sampler=sampler, batch_size=2, num_workers=2)
    batches = collect_batches(loader)
    refs = {v: reference_frames(index[v].path) for v in range(len(index))}
    for b in batches:
        for video, frame, got in zip(b["video_index"].reshape(-1).tolist(),
                                     b["frame_index"].reshape(-1).tolist(),
                                     b["frames"].reshape(-1, *b["frames"].shape[-3:])):
            np.testing.assert_array_equal(got.numpy(), refs[video][frame])
    stats = loader.decode_stats
    # each run's start decodes from its keyframe (GOP 5, B-frames): 75 for 60 here
    assert loader.uses_block_units and stats.decoded <= 1.3 * stats.delivered, stats
    whole = VideoLoader(index, sampler=sampler, batch_size=2, num_workers=2, lookahead=2)
    collect_batches(whole)
    assert whole.decode_stats.decoded > 1.3 * whole.decode_stats.delivered, whole.decode_stats


def _cell_key(plan, index, b, row):
    bp = plan.batch(b)
    video = int(bp.video_indices[row])
    return video, int(index[video].keyframe_before(int(bp.frame_indices[row, 0])))


@pytest.mark.parametrize(("stride", "span", "start"), [(1, None, 0), (2, None, 0), (3, 2, 0), (2, None, 3)])
def test_stream_gop_units_cut_each_row_at_its_gops_in_order(rigs, stride, span, start):
    """NVDEC's units over a plan of streams: every (batch, row) cell from ``start`` on comes
    once; a unit's pieces (a row's cells in it) are runs of consecutive batches in one GOP of
    one video, beginning in the unit's ``stride`` batches; a row's pieces are cut only where
    its GOP changes (or, with ``span``, after that many batches)."""
    from vidloader.pipeline._units import stream_gop_span, stream_gop_units

    index, rig_positions = rigs
    plan = MultiCameraClips(rig_positions, shuffle=False, streams=True).plan_epoch(
        index, epoch=0, batch_size=2)
    assert stream_gop_span(index) == 5  # the fixture's GOP
    limit = 5
    cells, pieces = collections.Counter(), collections.defaultdict(list)  # row -> [(first, last)]
    windows = []  # each unit's window of first batches (a window where no piece begins has none)
    for unit in stream_gop_units(plan, index, start, stride=stride, span=span):
        by_row = collections.defaultdict(list)
        for part in unit:
            for row in range(*part.rows(plan.batch(part.batch).batch_size)):
                cells[(part.batch, row)] += 1
                by_row[row].append(part.batch)
        for row, batches in by_row.items():
            first = batches[0]
            assert batches == list(range(first, first + len(batches))), (row, batches)
            windows.append((first - start) // stride)
            if span is None:  # one piece: one GOP
                assert len(batches) <= limit
                assert len({_cell_key(plan, index, b, row) for b in batches}) == 1
            else:  # pieces cut at ``span`` beginning in one window may share a unit
                assert len(batches) <= stride + span - 1
            pieces[row].append((first, batches[-1]))
        assert len(set(windows[-len(by_row):])) == 1, windows  # one window per unit
    assert windows == sorted(windows)
    rows = plan.batch(0).batch_size
    assert cells == collections.Counter((b, r) for b in range(start, len(plan)) for r in range(rows))
    for row, runs in pieces.items():
        runs.sort()
        for (a, z), (a2, _) in zip(runs, runs[1:]):
            assert a2 == z + 1
            assert span is not None or _cell_key(plan, index, z, row) != _cell_key(plan, index, a2, row)


def test_streams_on_nvdec_decode_each_gop_once_and_resume(rigs, monkeypatch):
    """The stream order on NVDEC with demux workers (the CPU stand-in of NVDEC): units are the
    GOPs the rows walk through, so each frame is decoded about once (whole-batch units
    decode each GOP again for every unit reaching into it); the batches are the plan's, in
    order, with the reference decode's frames; a loader resumed mid-epoch goes on with the
    same batches."""
    from . import _fake_nvc

    _fake_nvc.install_on_cpu(monkeypatch)
    index, rig_positions = rigs
    sampler = MultiCameraClips(rig_positions, shuffle=False, streams=True)

    def make(**kw):
        return VideoLoader(index, sampler=sampler, batch_size=2, backend="nvdec", num_workers=2,
                           device="cpu", **kw)

    loader = make()
    assert loader.uses_stream_gops and not loader.uses_block_units
    assert loader.memory_plan["gpu_staging_buffers"] < loader.staging_slots
    batches = collect_batches(loader)
    plan = sampler.plan_epoch(index, epoch=0, batch_size=2)
    assert len(batches) == len(plan)
    refs = {v: reference_frames(index[v].path) for v in range(len(index))}
    for b, batch in enumerate(batches):
        bp = plan.batch(b)
        assert batch["video_index"].reshape(-1).tolist() == bp.video_indices.tolist()
        assert batch["frame_index"].reshape(-1).tolist() == bp.frame_indices[:, 0].tolist()
        for video, frame, got in zip(bp.video_indices.tolist(), bp.frame_indices[:, 0].tolist(),
                                     batch["frames"].reshape(-1, *batch["frames"].shape[-3:])):
            diff = np.abs(got.numpy().astype(int) - refs[video][frame].astype(int))
            assert diff.mean() < 2.0 and diff.max() <= 6, (video, frame)  # NV12 kernels vs swscale
    stats = loader.decode_stats
    # each run's start decodes from its keyframe (GOP 5, B-frames): about 75 for 60 here
    assert stats.delivered == 6 * len(plan) and stats.decoded <= 1.3 * stats.delivered, stats
    whole = make(lookahead=2)
    assert not whole.uses_stream_gops
    collect_batches(whole)
    assert whole.decode_stats.decoded > 1.3 * whole.decode_stats.delivered, whole.decode_stats
    stream, full, _ = resumed_stream(make, after=3)
    assert len(stream) == len(full) == len(plan)
    for a, b in zip(stream, full):
        assert torch.equal(a["video_index"], b["video_index"]) and torch.equal(a["frames"], b["frames"])


@pytest.mark.parametrize("units_decoding", [1, 4])
def test_streams_on_nvdec_with_gop_boundaries_at_different_batches(rigs, monkeypatch, units_decoding):
    """Single-camera rigs (each video six times) cut into 30 runs: each row enters a new GOP
    at its own batch, so a unit holds several parts per batch (38 parts in 12 batches here,
    against 28 slots with one unit decoding). The scheduler counts the slots a unit needs by
    batch, not by part (counted by part, such a unit never fitted: a KeyError or a hang), and
    every planned frame comes, whatever ``units_decoding``."""
    from vidloader.pipeline._units import stream_gop_units

    from . import _fake_nvc

    _fake_nvc.install_on_cpu(monkeypatch)
    index, _ = rigs
    sampler = MultiCameraClips([[v] for v in range(len(index))] * 6, shuffle=False, streams=True)
    loader = VideoLoader(index, sampler=sampler, batch_size=30, backend="nvdec", num_workers=2,
                         device="cpu", nvdec_options={"units_decoding": units_decoding})
    assert loader.uses_stream_gops
    plan = sampler.plan_epoch(index, epoch=0, batch_size=30)
    assert max(len(u) for u in stream_gop_units(plan, index, 0)) > loader.staging_slots or units_decoding > 1
    batches = collect_batches(loader)
    assert [b["frame_index"].reshape(-1).tolist() for b in batches] == [
        plan.batch(k).frame_indices[:, 0].tolist() for k in range(len(plan))]
    assert loader.stats["gpu_staging"]["overflows"] == 0


def test_streams_count_each_frame_decoded_once_for_the_automatic_decoders(rigs, monkeypatch):
    """GOPs of streams decode each frame once, so the automatic decoder count is given one
    decoded frame per delivered one (``once``); the same rigs in random order are counted
    from each frame's keyframe in the first batches' plan."""
    from vidloader.pipeline import _config, _loader

    from . import _fake_nvc

    _fake_nvc.install_on_cpu(monkeypatch)
    index, rig_positions = rigs
    seen = []
    real = _config.decoded_per_delivered

    def spy(*args, **kwargs):
        seen.append((kwargs["once"], real(*args, **kwargs)))
        return seen[-1][1]
    monkeypatch.setattr(_loader, "decoded_per_delivered", spy)
    streams = VideoLoader(index, sampler=MultiCameraClips(rig_positions, shuffle=False, streams=True),
                          batch_size=2, backend="nvdec", num_workers=2, device="cpu")
    assert streams.uses_stream_gops and seen[-1] == (True, 1.0)
    assert streams.memory_plan["decoders"] == 4  # 64x48 frames: the fewest threads
    random_order = VideoLoader(index, sampler=MultiCameraClips(rig_positions, seed=1), batch_size=2,
                               backend="nvdec", num_workers=2, device="cpu")
    assert not random_order.uses_stream_gops
    assert seen[-1][0] is False and seen[-1][1] > 1.0  # GOPs of 5: frames after the keyframe


def test_stream_batches_are_their_in_order_samples_across_blocks(monkeypatch):
    """Batch ``i`` of the stream order holds in-order sample ``k·run + i`` in row group ``k``
    (its definition), also where the runs lie in different blocks of the in-order epoch and
    the stream batches are computed a block at a time (both blocks made small here)."""
    from vidloader.sampling import _epoch, _multicam

    monkeypatch.setattr(_epoch, "BLOCK_SAMPLES", 16)
    monkeypatch.setattr(_multicam, "BLOCK_SAMPLES", 16)
    index = _Lengths([37, 50, 41, 60, 45, 52, 39, 58])
    rigs = [[0, 1], [2, 3], [4, 5], [6, 7]]
    sampler = MultiCameraClips(rigs, sequence_length=3, stride=2, shuffle=False, streams=True, seed=5)
    for rank, world in ((0, 1), (1, 2)):
        plan = sampler.plan_epoch(index, epoch=2, batch_size=3, rank=rank, world_size=world)
        order = list(range(len(plan)))
        for b in order[::-1] + order:  # backwards first: blocks entered out of order
            got = plan.batch(b)
            parts = [plan.in_order.batch(p) for p in plan.in_order_positions(b)]
            assert got.batch_index == b and got.epoch == 2 and got.is_clip
            np.testing.assert_array_equal(got.video_indices,
                                          np.concatenate([p.video_indices for p in parts]))
            np.testing.assert_array_equal(got.frame_indices,
                                          np.concatenate([p.frame_indices for p in parts]))
            np.testing.assert_array_equal(got.sample_seeds,
                                          np.concatenate([p.sample_seeds for p in parts]))


def test_a_stream_epoch_walked_forward_computes_each_block_once(monkeypatch):
    """Walking the stream order forward locates each block of batches once, in one pass,
    and never has the in-order epoch compute blocks of its own (one per run and batch made a
    200-rig epoch ~10× slower than its decoding, session 22)."""
    from vidloader.sampling import _epoch, _multicam

    monkeypatch.setattr(_epoch, "BLOCK_SAMPLES", 16)
    monkeypatch.setattr(_multicam, "BLOCK_SAMPLES", 16)
    calls = collections.Counter()
    for cls in (_epoch.SampledEpoch, _multicam.StreamEpoch):
        original = cls._compute

        def counted(self, batches, original=original, name=cls.__name__):
            calls[name] += 1
            return original(self, batches)
        monkeypatch.setattr(cls, "_compute", counted)
    index = _Lengths([40] * 24)
    sampler = MultiCameraClips([[2 * r, 2 * r + 1] for r in range(12)], shuffle=False, streams=True)
    plan = sampler.plan_epoch(index, epoch=0, batch_size=4)
    for b in range(len(plan)):
        plan.batch(b)
    per_block = 16 // 4
    assert calls == {"StreamEpoch": -(-len(plan) // per_block)}


def test_two_readers_a_block_apart_do_not_recompute_each_others_blocks(monkeypatch):
    """NVDEC's stream-GOP units read batches ahead of those being dispatched: two readers
    alternating up to two blocks apart compute each block once (the plan keeps three)."""
    from vidloader.sampling import _multicam

    monkeypatch.setattr(_multicam, "BLOCK_SAMPLES", 16)
    calls = collections.Counter()
    original = _multicam.StreamEpoch._compute

    def counted(self, batches):
        calls[batches.start] += 1
        return original(self, batches)
    monkeypatch.setattr(_multicam.StreamEpoch, "_compute", counted)
    index = _Lengths([40] * 24)
    plan = MultiCameraClips([[2 * r, 2 * r + 1] for r in range(12)], shuffle=False,
                            streams=True).plan_epoch(index, epoch=0, batch_size=4)
    for b in range(len(plan) - 6):
        plan.batch(b + 6)  # the reader ahead
        plan.batch(b)  # the dispatcher
    assert set(calls.values()) == {1}


def test_stream_batches_match_their_definition_over_random_configurations(monkeypatch):
    """60 seeded configurations (rigs, cameras, clip shapes, ranks, epochs shorter and longer
    than the space, blocks of 1 to 8,192 samples), every batch in a shuffled, a backward and
    a forward walk: each equals its definition, in-order sample ``k·run + g`` per run
    (session 22's review ran 1,925 such configurations)."""
    import random

    from vidloader.sampling import _epoch, _multicam

    rng = random.Random(22)
    checked = 0
    while checked < 60:
        block = rng.choice([1, 2, 3, 7, 16, 64, 8192])
        monkeypatch.setattr(_epoch, "BLOCK_SAMPLES", block)
        monkeypatch.setattr(_multicam, "BLOCK_SAMPLES", block)
        rigs_n, cams = rng.randint(1, 10), rng.randint(1, 3)
        length, stride = rng.choice([1, 1, 2, 3]), rng.randint(1, 2)
        need = (length - 1) * stride + 1
        videos = list(range(rigs_n * cams))
        rng.shuffle(videos)
        rigs = [videos[r * cams:(r + 1) * cams] for r in range(rigs_n)]
        index = _Lengths([rng.randint(need, need + 25) for _ in videos])
        space = MultiCameraClips(rigs, sequence_length=length, stride=stride, shuffle=False,
                                 streams=True).sample_space(index).size
        batch_size = rng.randint(1, min(3 * space, 24))
        world = rng.randint(1, 3)
        num = rng.choice([None, rng.randint(1, max(1, space // 2)), rng.randint(space, 4 * space)])
        sampler = MultiCameraClips(rigs, sequence_length=length, stride=stride, shuffle=False,
                                   streams=True, num_samples=num, seed=rng.randint(0, 99))
        plan = sampler.plan_epoch(index, epoch=rng.randint(0, 4), batch_size=batch_size,
                                  rank=rng.randrange(world), world_size=world)
        if len(plan) == 0:
            continue
        order = list(range(len(plan)))
        rng.shuffle(order)
        for b in order + sorted(order, reverse=True) + sorted(order):
            got = plan.batch(b)
            parts = [plan.in_order.batch(p) for p in plan.in_order_positions(b)]
            assert (got.epoch, got.batch_index, got.is_clip) == (parts[0].epoch, b, parts[0].is_clip)
            for field in ("video_indices", "frame_indices", "sample_seeds"):
                want = np.concatenate([getattr(p, field) for p in parts])
                assert getattr(got, field).dtype == want.dtype
                np.testing.assert_array_equal(getattr(got, field), want)
        checked += 1


def test_cell_keys_of_a_batch_are_each_rows_video_and_gop_keyframe():
    """``_CellKeys`` locates every row's GOP for a whole batch at once: the key is the row's
    video and ``keyframe_before`` of its first frame, for ragged GOPs, repeated videos and
    rows in any order; a frame outside its video raises ``FrameIndexError``."""
    import random

    from vidloader.errors import FrameIndexError
    from vidloader.pipeline._units import _CellKeys
    from vidloader.sampling._base import BatchPlan

    rng = random.Random(4)
    records = []
    for _ in range(12):
        frames = rng.randint(5, 80)
        records.append(_Record(sorted({0} | {rng.randrange(1, frames) for _ in range(4)}), frames))
    keys_of = _CellKeys(records)
    for _ in range(50):
        videos = [rng.randrange(12) for _ in range(rng.randint(1, 20))]
        firsts = [rng.randrange(records[v].num_frames) for v in videos]
        bp = BatchPlan(epoch=0, batch_index=0, video_indices=np.asarray(videos, np.int64),
                       frame_indices=np.asarray(firsts, np.int64)[:, None],
                       sample_seeds=np.zeros(len(videos), np.uint64))
        want = [(v << 32) | int(records[v].keyframe_before(f)) for v, f in zip(videos, firsts)]
        assert keys_of(bp).tolist() == want
    bad = BatchPlan(epoch=0, batch_index=0, video_indices=np.asarray([3, 5], np.int64),
                    frame_indices=np.asarray([[0], [records[5].num_frames]], np.int64),
                    sample_seeds=np.zeros(2, np.uint64))
    with pytest.raises(FrameIndexError):
        keys_of(bad)


def _reference_stream_gop_units(plan, index, start, stride, span):
    """``stream_gop_units`` as first written (session 14): row by row, cell by cell."""
    import heapq

    n, open_pieces, closed, units = len(plan), {}, [], []
    for b in range(start, n):
        bp = plan.batch(b)
        keys = [(int(v), int(index[int(v)].keyframe_before(int(f))))
                for v, f in zip(bp.video_indices, bp.frame_indices[:, 0])]
        for row, key in enumerate(keys):
            piece = open_pieces.get(row)
            if piece is not None and piece[0] == key and b - piece[1] < span:
                continue
            if piece is not None:
                heapq.heappush(closed, (piece[1], b - 1, row))
            open_pieces[row] = (key, b)
    for row, (_, first) in open_pieces.items():
        heapq.heappush(closed, (first, n - 1, row))
    by_unit = collections.defaultdict(list)
    for first, last, row in closed:
        by_unit[(first - start) // stride].append((first, last, row))
    for u in sorted(by_unit):
        cells = sorted((b, row) for first, last, row in by_unit[u] for b in range(first, last + 1))
        parts = []
        for b, row in cells:
            if parts and parts[-1][0] == b and parts[-1][2] == row:
                parts[-1] = (b, parts[-1][1], row + 1)
            else:
                parts.append((b, row, row + 1))
        units.append(parts)
    return units


def test_stream_gop_units_equal_their_row_by_row_definition_on_ragged_gops():
    """The units (computed with numpy a batch at a time) equal the row-by-row definition on 80
    seeded plans: ragged GOPs and lengths, 1-3 cameras, starts, strides and spans."""
    import random

    from vidloader.pipeline._units import stream_gop_units

    rng = random.Random(14)
    checked = 0
    while checked < 80:
        cams, rigs_n = rng.randint(1, 3), rng.randint(1, 8)
        records = []
        for _ in range(cams * rigs_n):
            frames = rng.randint(6, 70)
            records.append(_Record(sorted({0} | {rng.randrange(1, frames) for _ in range(5)}), frames))
        index = _Lengths([r.num_frames for r in records])
        plan = MultiCameraClips([[r * cams + c for c in range(cams)] for r in range(rigs_n)],
                                shuffle=False, streams=True,
                                num_samples=rng.choice([None, rng.randint(1, 300)])
                                ).plan_epoch(index, epoch=0, batch_size=rng.randint(1, 6))
        if len(plan) == 0:
            continue
        start, stride, span = rng.randrange(len(plan)), rng.randint(1, 6), rng.randint(1, 40)
        got = [[(p.batch, p.row_start, p.row_stop) for p in unit]
               for unit in stream_gop_units(plan, records, start, stride=stride, span=span)]
        assert got == _reference_stream_gop_units(plan, records, start, stride, span)
        checked += 1
