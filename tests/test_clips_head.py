"""``Clips(first_seconds=...)``: clips only from the head of each video (SPDL's Kinetics
benchmark decodes the first 0.5 s of every video), counted by timestamps, exact through the
loader."""

from __future__ import annotations

import numpy as np
import pytest

import vidloader
from vidloader import Clips, ConfigError, VideoLoader
from vidloader.synthetic import VideoSpec, make_dataset

from .media import reference_frames


@pytest.fixture(scope="module")
def videos(tmp_path_factory):
    root = tmp_path_factory.mktemp("head")
    specs = [VideoSpec(width=64, height=48, num_frames=40, fps=30, gop=10, bframes=2, seed=1),
             VideoSpec(width=64, height=48, num_frames=40, fps=10, gop=10, bframes=0, seed=2),
             VideoSpec(width=64, height=48, num_frames=40, fps=30, gop=8, vfr=True, seed=3)]
    index = vidloader.build_index(make_dataset(root, specs, num_workers=1), num_workers=0, progress=False)
    return index


def _head(record, seconds):
    from fractions import Fraction

    limit = Fraction(str(seconds))
    return sum((int(p) - int(record.pts[0])) * record.time_base < limit for p in record.pts)


def test_each_video_keeps_the_frames_timed_in_its_first_seconds(videos):
    heads = videos.frames_before(0.5)
    assert heads.tolist() == [_head(r, 0.5) for r in videos]
    assert heads[0] == 15 and heads[1] == 5  # 30 and 10 frames/s
    assert videos.frames_before(0.5) is heads  # kept by the index


def test_every_clip_of_the_heads_once_per_epoch(videos):
    sampler = Clips(sequence_length=4, stride=2, first_seconds=0.5, seed=3)  # a clip spans 7 frames
    heads = videos.frames_before(0.5)
    want = {(v, s) for v, h in enumerate(heads.tolist()) for s in range(h - 6)}  # video 1: none
    plan = sampler.plan_epoch(videos, batch_size=4, epoch=0)
    got = [(int(v), int(f[0])) for b in plan for v, f in zip(b.video_indices, b.frame_indices)]
    assert sorted(got) == sorted(want) and len(got) == len(want)
    assert all(int(f[-1]) < heads[int(v)] for b in plan for v, f in zip(b.video_indices, b.frame_indices))
    assert sampler.num_samples(videos) == len(want)


def test_heads_too_short_for_any_clip_are_refused(videos):
    with pytest.raises(ConfigError, match="raise first_seconds"):
        Clips(sequence_length=30, first_seconds=0.5).plan_epoch(videos, batch_size=2, epoch=0)


def test_a_frame_at_exactly_first_seconds_is_out():
    """0.28 s at a time base of 1/12800 is 3584 ticks; in floating point the limit came out a
    hair above and counted the frame at exactly 0.28 s."""
    import dataclasses
    from fractions import Fraction

    from vidloader.index import VideoRecord

    fields = {f.name for f in dataclasses.fields(VideoRecord)}
    assert {"pts", "time_base"} <= fields
    record = type("R", (), {"pts": np.arange(10) * 512, "time_base": Fraction(1, 12800),
                            "frames_before": VideoRecord.frames_before})()
    assert record.frames_before(0.28) == 7  # 25 frames/s: frame 7 is at exactly 0.28 s
    assert record.frames_before(0.2801) == 8


def test_states_saved_before_first_seconds_still_resume():
    assert "first_seconds" not in Clips(sequence_length=4).config()
    assert Clips(sequence_length=4, first_seconds=0.5).config()["first_seconds"] == 0.5


def test_an_index_without_timestamps_is_refused():
    class Counts:  # frame counts only, as a synthetic stand-in index gives
        num_frames = np.array([40, 40])

        def __len__(self):
            return 2

    with pytest.raises(ConfigError, match="timestamps"):
        Clips(sequence_length=4, first_seconds=0.5).num_samples(Counts())


@pytest.mark.parametrize("bad", [0, -0.5, "0.5", True])
def test_first_seconds_must_be_a_positive_number(bad):
    with pytest.raises(ConfigError, match="first_seconds"):
        Clips(sequence_length=4, first_seconds=bad)


def test_head_clips_through_the_loader_are_exact(videos):
    loader = VideoLoader(videos, sampler=Clips(sequence_length=4, first_seconds=0.5, seed=1),
                         batch_size=3, num_workers=2)
    refs = {k: reference_frames(r.path) for k, r in enumerate(videos)}
    seen = 0
    for batch in loader:
        for clip, v, f in zip(batch["frames"], batch["video_index"], batch["frame_index"]):
            np.testing.assert_array_equal(clip.numpy(), refs[int(v)][f.numpy()])
            seen += 1
    assert seen == Clips(sequence_length=4, first_seconds=0.5).num_samples(videos)
    # a resume under another head is refused
    state = loader.state_dict()
    other = VideoLoader(videos, sampler=Clips(sequence_length=4, first_seconds=1.0, seed=1),
                        batch_size=3, num_workers=0)
    with pytest.raises(ConfigError):
        other.load_state_dict(state)
