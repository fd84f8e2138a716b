"""Reliability: stale files, index paths confined to their folder, concealed decode errors,
skips at the smallest unit (issue 17). Tiny generated videos; seconds each."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

import vidloader
from vidloader import PathOutsideRootError, StaleIndexError, VideoIndex, build_index
from vidloader.synthetic import VideoSpec, make_video

from . import _fake_nvc
from .media import reference_frames


def _video(path: Path, *, seed: int, frames: int = 30, gop: int = 10) -> Path:
    make_video(path, VideoSpec(width=96, height=64, num_frames=frames, gop=gop, bframes=2, seed=seed))
    return path


@pytest.fixture
def two_videos(tmp_path) -> tuple[Path, Path]:
    """Two valid videos of the same length and different content (so different sizes)."""
    a = _video(tmp_path / "ds" / "a.mp4", seed=1)
    b = _video(tmp_path / "other" / "b.mp4", seed=2)
    assert a.stat().st_size != b.stat().st_size
    return a, b


# ---------------------------------------------------------------- stale files (item 2)

def test_index_records_size_and_mtime(two_videos):
    a, _ = two_videos
    record = build_index(a, num_workers=0, progress=False)[0]
    assert record.size_bytes == a.stat().st_size
    assert record.mtime_ns == a.stat().st_mtime_ns


def test_a_replaced_file_raises_stale_index_error(two_videos):
    a, b = two_videos
    record = build_index(a, num_workers=0, progress=False)[0]
    shutil.copyfile(b, a)  # another valid video, same length, other pixels
    with pytest.raises(StaleIndexError, match=r"a\.mp4.*changed after it was indexed.*size.*re-index"):
        vidloader.decode_frames(a, [0, 5], index_record=record)


def test_same_size_other_mtime_is_stale_unless_check_mtime_false(two_videos, tmp_path):
    a, _ = two_videos
    index = build_index(a, num_workers=0, progress=False)
    index.save(tmp_path / "ds" / "index.npz")
    os.utime(a, ns=(a.stat().st_atime_ns, a.stat().st_mtime_ns + 10**9))  # touched, same bytes
    with pytest.raises(StaleIndexError, match="modified"):
        vidloader.decode_frames(a, [0], index_record=index[0])
    sizes_only = VideoIndex.load(tmp_path / "ds" / "index.npz", check_mtime=False)
    assert sizes_only[0].mtime_ns == 0
    assert vidloader.decode_frames(a, [0], index_record=sizes_only[0]).shape[0] == 1


def test_a_deleted_file_names_it(two_videos):
    a, _ = two_videos
    record = build_index(a, num_workers=0, progress=False)[0]
    a.unlink()
    with pytest.raises(vidloader.VideoNotFoundError, match=r"a\.mp4.*re-index"):
        vidloader.decode_frames(a, [0], index_record=record)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_loader_skips_and_counts_a_stale_file_once(tmp_path, num_workers):
    paths = [_video(tmp_path / f"v{i}.mp4", seed=10 + i, frames=20) for i in range(3)]
    index = build_index(paths, num_workers=0, progress=False)
    shutil.copyfile(_video(tmp_path / "new.mp4", seed=99, frames=20), paths[1])
    loader = vidloader.VideoLoader(index, batch_size=8, num_workers=num_workers, on_error="skip",
                                   sampler=vidloader.RandomFrames(seed=0))
    seen = [(int(v), int(f)) for b in loader for v, f in zip(b["video_index"], b["frame_index"])]
    assert sorted(seen) == [(v, f) for v in (0, 2) for f in range(20)]  # each once, no stale frame
    assert loader.stats["skipped_samples"] == 20
    assert loader.stats["skipped_files"] == [str(paths[1])]  # named once


def test_version_3_index_loads_with_mtime_unknown(two_videos, tmp_path):
    a, _ = two_videos
    path = tmp_path / "ds" / "index.npz"
    build_index(a, num_workers=0, progress=False).save(path)
    with np.load(path, allow_pickle=False) as npz:
        arrays = {k: npz[k] for k in npz.files if k not in ("mtime_ns", "warning")}
    header = json.loads(str(arrays["header"]))
    arrays["header"] = np.array(json.dumps({**header, "version": 3}))
    with open(path, "wb") as f:
        np.savez(f, **arrays)
    loaded = VideoIndex.load(path)
    assert loaded[0].mtime_ns == 0 and loaded[0].size_bytes == a.stat().st_size
    assert loaded[0].warning == ""  # a column older files lack


# ---------------------------------------------------------------- paths confined (item 4)

def _index_with_stored_path(tmp_path: Path, source: Path, stored: str) -> Path:
    """An index file in ``tmp_path/ds`` whose single video path column reads ``stored``."""
    path = tmp_path / "ds" / "index.npz"
    build_index(source, num_workers=0, progress=False).save(path)
    with np.load(path, allow_pickle=False) as npz:
        arrays = {k: npz[k] for k in npz.files}
    arrays["path"] = np.array([stored])
    with open(path, "wb") as f:
        np.savez(f, **arrays)
    return path


@pytest.mark.parametrize("stored", ["../other/b.mp4", "sub/../../other/b.mp4", "ABSOLUTE", "/etc/passwd"])
def test_saved_index_paths_cannot_leave_its_folder(two_videos, tmp_path, stored):
    a, b = two_videos
    stored = str(b) if stored == "ABSOLUTE" else stored
    path = _index_with_stored_path(tmp_path, a, stored)
    with pytest.raises(PathOutsideRootError, match=r"index\.npz.*outside.*allow_outside_root"):
        VideoIndex.load(path)


def test_allow_outside_root_opts_in(two_videos, tmp_path):
    a, b = two_videos
    path = _index_with_stored_path(tmp_path, a, "../other/b.mp4")
    assert VideoIndex.load(path, allow_outside_root=True).paths == [str(b)]
    assert VideoIndex.load(path, allow_outside_root=[b.parent]).paths == [str(b)]
    with pytest.raises(PathOutsideRootError):
        VideoIndex.load(path, allow_outside_root=[tmp_path / "elsewhere"])


def test_paths_inside_the_folder_still_load(two_videos, tmp_path):
    a, _ = two_videos
    path = _index_with_stored_path(tmp_path, a, "./sub/../a.mp4")
    assert VideoIndex.load(path).paths == [str(a)]


@pytest.mark.parametrize("video_dir, clip", [("../other/", "b"), ("./", "../other/b"), ("ABS", "b")])
def test_nvidia_json_paths_cannot_leave_its_folder(two_videos, tmp_path, video_dir, clip):
    _, b = two_videos
    video_dir = str(b.parent) + "/" if video_dir == "ABS" else video_dir
    json_path = tmp_path / "ds" / "index_frame.json"
    json_path.write_text(json.dumps({video_dir: {clip: 30}}))
    with pytest.raises(PathOutsideRootError, match="index_frame.json"):
        VideoIndex.from_nvidia_json(json_path, num_workers=0, progress=False)
    index = VideoIndex.from_nvidia_json(json_path, num_workers=0, progress=False,
                                        allow_outside_root=True)
    assert index.paths == [str(b)]


# ---------------------------------------------------------------- concealed errors (item 1, 5)

def _damage_reference_picture(src: Path, dst: Path, which: int) -> int:
    """Copy ``src`` to ``dst`` with the payload of its ``which``-th non-key picture (no
    B-frames: every one is a reference) overwritten with random bytes; return its display
    index. FFmpeg decodes such a file without an error, concealing the damage."""
    import av

    with av.open(str(src)) as c:
        packets = [(p.pos, p.size, p.pts) for p in c.demux(c.streams.video[0])
                   if p.size and not p.is_keyframe]
    pos, size, pts = packets[which]
    data = bytearray(src.read_bytes())
    data[pos + 8:pos + size] = np.random.default_rng(0).integers(0, 256, size - 8, np.uint8).tobytes()
    dst.write_bytes(bytes(data))
    with av.open(str(src)) as c:
        all_pts = sorted(p.pts for p in c.demux(c.streams.video[0]) if p.size)
    return all_pts.index(pts)


@pytest.fixture
def damaged(tmp_path) -> tuple[Path, Path, int]:
    good = tmp_path / "good.mp4"
    make_video(good, VideoSpec(width=96, height=64, num_frames=30, gop=10, bframes=0, seed=0))
    bad = tmp_path / "bad.mp4"
    return good, bad, _damage_reference_picture(good, bad, 12)


def test_concealed_damage_raises_instead_of_delivering_wrong_pixels(damaged):
    good, bad, frame = damaged
    record = build_index(bad, num_workers=0, progress=False)[0]  # indexes fine: demux only
    with pytest.raises(vidloader.CorruptVideoError, match=r"bad\.mp4.*FFmpeg reported damage"):
        vidloader.decode_frames(bad, range(30), index_record=record)
    # Frames before the damaged picture decode, and match the intact file.
    before = vidloader.decode_frames(bad, range(frame), index_record=record).numpy()
    np.testing.assert_array_equal(before, reference_frames(good)[:frame])


def test_detection_can_be_turned_off(damaged):
    from vidloader.decoding import DecodeTask, get_executor

    _, bad, _ = damaged
    record = build_index(bad, num_workers=0, progress=False)[0]
    got = []
    with get_executor("cpu", detect_errors=False) as ex:
        ex.decode(DecodeTask.for_frames(0, record, range(30)), lambda i, f: got.append(i))
    assert got == list(range(30))  # FFmpeg's concealed frames, as before


@pytest.mark.parametrize("num_workers", [0, 1])
def test_skip_keeps_frames_before_the_damage_and_the_later_gops(damaged, tmp_path, num_workers):
    good, bad, frame = damaged
    index = build_index(bad, num_workers=0, progress=False)
    gop_end = (frame // 10 + 1) * 10  # GOP 10: the damaged picture's GOP ends there
    assert gop_end < 30  # an intact GOP follows in the same task (one batch of 30)
    loader = vidloader.VideoLoader(index, batch_size=30, num_workers=num_workers, on_error="skip",
                                   sampler=vidloader.SequentialFrames())
    batches = list(loader)
    delivered = np.concatenate([b["frame_index"].numpy() for b in batches])
    frames = np.concatenate([b["frames"].numpy() for b in batches])
    kept = list(range(frame)) + list(range(gop_end, 30))  # only the damaged GOP's rest is lost
    assert list(delivered) == kept
    np.testing.assert_array_equal(frames, reference_frames(good)[kept])
    assert loader.stats["skipped_samples"] == gop_end - frame
    assert loader.stats["skipped_files"] == [str(bad)]


# ---------------------------------------------------------------- skips on NVDEC (item 5)

@pytest.fixture
def slice_damaged(tmp_path) -> tuple[Path, VideoIndex, int]:
    """The intact file, the index of its copy with the slice of picture 14 overwritten (its
    NAL lengths kept, so the damage reaches the decoder, not the demuxer), and 14. GOP 10, no
    B-frames: GOPs 0..9 and 20..29 are intact, 10..19 damaged from 14 on."""
    from .media import damage_slice_data

    good, bad = tmp_path / "good.mp4", tmp_path / "bad.mp4"
    make_video(good, VideoSpec(width=96, height=64, num_frames=30, gop=10, bframes=0, seed=0))
    frame = damage_slice_data(good, bad, 12)
    assert frame == 14
    return good, build_index(bad, num_workers=0, progress=False), frame


def _nvdec_skip_epoch(index, num_workers: int, fallback: str, caplog):
    """One epoch of the whole file in one batch (one task of three GOPs) on the stand-in
    NVDEC under ``on_error="skip"``: ``(frame indices, frames, stats)``; asserts the warning
    names the file once."""
    import logging

    loader = vidloader.VideoLoader(index, batch_size=30, num_workers=num_workers, backend="nvdec",
                                   device="cpu", on_error="skip", fallback=fallback,
                                   sampler=vidloader.SequentialFrames())
    with caplog.at_level(logging.WARNING, logger="vidloader"):
        batches = list(loader)
    warned = [r for r in caplog.records if r.getMessage().startswith("skipping a file")]
    assert len(warned) == 1 and index[0].path in warned[0].getMessage()
    delivered = np.concatenate([b["frame_index"].numpy() for b in batches])
    return list(delivered), np.concatenate([b["frames"].numpy() for b in batches]), loader.stats


@pytest.mark.parametrize("num_workers", [0, 2])
def test_nvdec_cpu_fallback_skips_only_the_damaged_gop(slice_damaged, fake_nvdec, num_workers, caplog):
    """``fallback="cpu"``: NVDEC reports the damaged GOP (the stand-in is told to, as the
    device's NVDEC printed its decode error for such a slice), the file goes to the CPU, whose
    decode stops at the damaged picture and goes on with the GOP after it: frames before the
    damage and the later GOP are delivered, only the damaged GOP's rest is skipped. In one
    process and from separation mode's bundles alike. Before, the CPU decode stopped at the
    damage and the later GOP was skipped too. In one process the batch is one unit, all of it
    decoded again on the CPU (bit-exact); with two demux workers the first batch is cut into
    whole GOPs, and the unit of the intact GOPs stays NVDEC's (the stand-in's conversion,
    within 3 of the CPU's), the damaged GOP's is the CPU's (bit-exact)."""
    good, index, frame = slice_damaged
    fake_nvdec.conceal = [_fake_nvc.packet_of(index[0], frame)]
    delivered, frames, stats = _nvdec_skip_epoch(index, num_workers, "cpu", caplog)
    kept = list(range(frame)) + list(range(20, 30))
    assert delivered == kept
    want = reference_frames(good)[kept]
    damaged_gop = [k for k, f in enumerate(kept) if 10 <= f < 20]
    np.testing.assert_array_equal(frames[damaged_gop], want[damaged_gop])
    if num_workers == 0:
        np.testing.assert_array_equal(frames, want)
    else:
        intact = [k for k in range(len(kept)) if k not in damaged_gop]
        diff = np.abs(frames[intact].astype(int) - want[intact])
        assert 0 < diff.max() <= 3  # the stand-in's conversion: these rows are NVDEC's
    assert stats["skipped_samples"] == 20 - frame
    assert stats["skipped_files"] == [index[0].path]
    assert list(stats["cpu_fallback_files"]) == [index[0].path]


@pytest.mark.parametrize("num_workers", [0, 2])
def test_nvdec_without_fallback_skips_only_the_damaged_gop(slice_damaged, fake_nvdec, num_workers, caplog):
    """``fallback="error"``: NVDEC's suspect GOP is skipped whole (none of its frames is
    trusted), the GOPs before and after it are delivered: in one process (demuxed from the
    file) and in separation mode, where the GOPs after it are decoded from the tail of the
    demux worker's packet bundle. Before, separation mode skipped the rest of the task. The
    stand-in's NV12 to RGB differs from swscale by a few levels (``test_combo.py``'s
    tolerance), so the pixels are compared within it; concealed frames are far off."""
    good, index, frame = slice_damaged
    fake_nvdec.conceal = [_fake_nvc.packet_of(index[0], frame)]
    delivered, frames, stats = _nvdec_skip_epoch(index, num_workers, "error", caplog)
    kept = list(range(10)) + list(range(20, 30))
    assert delivered == kept
    diff = np.abs(frames.astype(int) - reference_frames(good)[kept].astype(int))
    assert diff.max() <= 6 and diff.mean() < 2.0
    assert stats["skipped_samples"] == 10
    assert stats["skipped_files"] == [index[0].path]
    assert stats["cpu_fallback_files"] == {}


@pytest.fixture
def prefix_broken(tmp_path) -> tuple[Path, VideoIndex]:
    """The intact file and the index of its copy with the NAL length prefix of picture 15
    (GOP 10..19 of three) overwritten: NVDEC's demux refuses GOP 10..19, the CPU decodes the
    whole file bit-exact."""
    from .media import break_nal_length

    good, bad = tmp_path / "good.mp4", tmp_path / "bad.mp4"
    make_video(good, VideoSpec(width=96, height=64, num_frames=30, gop=10, bframes=0, seed=0))
    break_nal_length(good, bad, 15)
    return good, build_index(bad, num_workers=0, progress=False)


def _nvdec_epoch(index, num_workers: int, **options):
    """One epoch in batches of 8 on the stand-in NVDEC: ``(frame indices, frames, stats)``."""
    loader = vidloader.VideoLoader(index, batch_size=8, num_workers=num_workers, backend="nvdec",
                                   device="cpu", sampler=vidloader.SequentialFrames(), **options)
    batches = list(loader)
    delivered = np.concatenate([b["frame_index"].numpy() for b in batches])
    return list(delivered), np.concatenate([b["frames"].numpy() for b in batches]), loader.stats


@pytest.mark.parametrize("on_error", ["skip", "raise"])
def test_separation_mode_decodes_a_file_nvdec_cannot_demux_on_the_cpu(prefix_broken, fake_nvdec,
                                                                      on_error, caplog):
    """A GOP whose demux fails in a separation-mode worker (the Annex B filter refuses a NAL
    length prefix) sends the task to the CPU fallback in the loader's process, as one process
    does: every frame once, the same as in one process (those of the file's CPU tasks
    bit-exact), the file counted and logged once. Before, the worker
    failed the task: its samples skipped under "skip", a WorkerError under "raise"."""
    import logging

    good, index = prefix_broken
    one, one_frames, _ = _nvdec_epoch(index, 0, on_error=on_error)
    with caplog.at_level(logging.INFO, logger="vidloader"):
        delivered, frames, stats = _nvdec_epoch(index, 2, on_error=on_error)
    assert delivered == one == list(range(30))
    np.testing.assert_array_equal(frames, one_frames)
    # Batches of 8: the tasks of frames 8..23 (GOP 10..19's) come from the CPU, bit-exact;
    # the others from the stand-in, within its NV12 to RGB's tolerance (see above).
    np.testing.assert_array_equal(frames[8:24], reference_frames(good)[8:24])
    diff = np.abs(frames.astype(int) - reference_frames(good).astype(int))
    assert diff.max() <= 6 and diff.mean() < 2.0
    assert list(stats["cpu_fallback_files"]) == [index[0].path]
    assert stats["skipped_samples"] == 0
    logged = [r for r in caplog.records if r.getMessage().startswith(f"decoding {index[0].path}")]
    assert len(logged) == 1


def test_separation_mode_without_fallback_skips_only_the_gop_that_fails_to_demux(prefix_broken,
                                                                                fake_nvdec):
    """``fallback="error"``, ``on_error="skip"``: the worker demuxes the failed task's GOPs one
    by one and keeps those that demux, so only GOP 10..19's samples are skipped, as in one
    process. Before, the whole task (the file's 30 frames) was skipped."""
    good, index = prefix_broken
    one, _, one_stats = _nvdec_epoch(index, 0, on_error="skip", fallback="error")
    delivered, frames, stats = _nvdec_epoch(index, 2, on_error="skip", fallback="error")
    kept = list(range(10)) + list(range(20, 30))
    assert delivered == one == kept
    diff = np.abs(frames.astype(int) - reference_frames(good)[kept].astype(int))
    assert diff.max() <= 6 and diff.mean() < 2.0  # the stand-in's NV12 to RGB (see above)
    assert stats["skipped_samples"] == one_stats["skipped_samples"] == 10
    assert stats["skipped_files"] == [index[0].path]
    assert stats["cpu_fallback_files"] == {}


def test_separation_mode_still_fails_a_stale_file_whole(prefix_broken, fake_nvdec):
    """A stale file is not retried on the CPU: skipped whole under "skip", as before."""
    _, index = prefix_broken
    path = Path(index[0].path)
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))
    loader = vidloader.VideoLoader(index, batch_size=8, num_workers=2, backend="nvdec",
                                   device="cpu", on_error="skip", sampler=vidloader.SequentialFrames())
    assert list(loader) == []
    assert loader.stats["skipped_samples"] == 30
    assert loader.stats["cpu_fallback_files"] == {}


# ---------------------------------------------------------------- NVDEC path (item 7)

def test_nvdec_demux_refuses_a_file_replaced_by_a_smaller_video(two_videos):
    """On the device this file killed the epoch with an untyped RuntimeError from reshaping a
    smaller picture; the stat at demux now refuses it first, typed (skipped under "skip")."""
    from vidloader.decoding.nvdec._annexb import ContainerCache, demux_gops

    a, _ = two_videos
    record = build_index(a, num_workers=0, progress=False)[0]
    make_video(a, VideoSpec(width=48, height=32, num_frames=30, gop=10, seed=3))
    task = vidloader.decoding.DecodeTask.for_frames(0, record, [0, 12])
    with pytest.raises(StaleIndexError, match=r"a\.mp4.*size"):
        demux_gops(record, task.gops, container_cache=ContainerCache())


# ---------------------------------------------------------------- probe cross-check (item 3)

def _box(data: bytes, name: bytes) -> tuple[int, int]:
    """Offset and size of the top-level MP4 box ``name``."""
    at = 0
    while at + 8 <= len(data):
        size, kind = int.from_bytes(data[at:at + 4], "big"), data[at + 4:at + 8]
        if kind == name:
            return at, size
        at += max(size, 8)
    raise AssertionError(f"no {name!r} box")


def test_moov_damage_is_rejected_or_flagged_never_silently_short(tmp_path):
    """Issue 17: 200 random bytes inside ``moov`` indexed 31 of 90 frames without a word."""
    good = tmp_path / "good.mp4"
    make_video(good, VideoSpec(width=96, height=64, num_frames=90, gop=30, bframes=2, seed=4))
    data = good.read_bytes()
    start, size = _box(data, b"moov")
    rng = np.random.default_rng(17)
    paths = []
    for case, at in enumerate(np.linspace(start + 8, start + size - 200, 24).astype(int)):
        bad = bytearray(data)
        bad[at:at + 200] = rng.integers(0, 256, 200, np.uint8).tobytes()
        paths.append(tmp_path / f"bad{case:02d}.mp4")
        paths[-1].write_bytes(bytes(bad))
    index = build_index(paths, num_workers=0, progress=False)
    silent = [(r.path, r.num_frames) for r in index if not r.warning and r.num_frames != 90]
    assert silent == []
    assert len(index) + len(index.rejected) == len(paths)  # each file rejected or indexed


class _Stream:
    def __init__(self, frames=0, seconds=0.0):
        from fractions import Fraction

        self.frames, self.time_base = frames, Fraction(1, 1000)
        self.duration = int(seconds * 1000) or None


class _Container:
    def __init__(self, fmt="mov,mp4,m4a,3gp,3g2,mj2", streams=1, seconds=0.0):
        self.format = type("F", (), {"name": fmt})()
        self.streams, self.duration = [None] * streams, int(seconds * 1e6) or None


def _check(container, stream, found=90, discarded=0, span=3.0):
    from vidloader.index._crosscheck import cross_check

    return cross_check(container, stream, "/d/v.mp4", found=found, discarded=discarded,
                       span_seconds=span, frame_seconds=1 / 30)


def test_cross_check_rule():
    mp4, avi = _Container(), _Container("avi")
    assert _check(mp4, _Stream(90, 3.0)) == ""
    assert _check(mp4, _Stream(90, 3.0), found=88, span=2.95) == ""  # within the tolerance
    with pytest.raises(vidloader.CorruptVideoError, match=r"v\.mp4.*states 90 frames but only 31"):
        _check(mp4, _Stream(90, 3.0), found=31, span=1.03)
    assert "30 were demuxed" not in _check(avi, _Stream(900, 3.0))  # AVI counts ticks: no check
    assert "states 90 frames but 120" in _check(mp4, _Stream(90), found=120)
    assert "hides 61 of the 90" in _check(mp4, _Stream(90, 3.0), found=29, discarded=61)
    assert "states 3.000 s of video but its frames span 1.000 s" in _check(
        _Container("matroska,webm", seconds=3.0), _Stream(), span=1.0)
    # A container duration that may be the audio's is not compared.
    assert _check(_Container("matroska,webm", streams=2, seconds=9.0), _Stream(), span=1.0) == ""


def test_flag_is_saved_and_shown(two_videos, tmp_path, capsys):
    import dataclasses

    from vidloader.cli._index import summarize
    from vidloader.cli._info import describe_record

    a, _ = two_videos
    index = build_index(a, num_workers=0, progress=False)
    assert index[0].warning == "" and index.flagged == []
    flagged = VideoIndex([dataclasses.replace(index[0], warning="its frames span 1 s")])
    flagged.save(tmp_path / "ds" / "index.npz")
    loaded = VideoIndex.load(tmp_path / "ds" / "index.npz")
    assert [r.warning for r in loaded.flagged] == ["its frames span 1 s"]
    assert f"1 indexed with a warning:\n  {a}: its frames span 1 s" in summarize(loaded)
    assert "warning     its frames span 1 s" in describe_record(loaded[0])


# ---------------------------------------------------------------- same size and mtime (item 7)

def _replace_keeping_size_and_mtime(path: Path, spec: VideoSpec) -> None:
    """Overwrite ``path`` with a video of ``spec``, padded (a trailing MP4 ``free`` box) to the
    old byte size and given back the old modification time: the stat check cannot see it."""
    st = path.stat()
    data = make_video(path.with_name("replacement.mp4"), spec).read_bytes()
    pad = st.st_size - len(data)
    assert pad >= 8, "the replacement must be smaller than the original"
    path.write_bytes(data + pad.to_bytes(4, "big") + b"free" + bytes(pad - 8))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


@pytest.fixture
def swapped(tmp_path) -> tuple[VideoIndex, Path]:
    """Three indexed 96x64 videos; the second then replaced by a 48x32 one (same frame
    times) of the same byte size and modification time."""
    paths = [_video(tmp_path / f"v{i}.mp4", seed=20 + i, frames=20) for i in range(3)]
    index = build_index(paths, num_workers=0, progress=False)
    _replace_keeping_size_and_mtime(paths[1], VideoSpec(width=48, height=32, num_frames=20, gop=10,
                                                        bframes=2, seed=7))
    index[1].check_unchanged()  # the stat check passes: only the pictures tell
    return index, paths[1]


def test_cpu_refuses_pictures_of_another_size(swapped):
    index, path = swapped
    with pytest.raises(vidloader.CorruptVideoError, match=r"v1\.mp4: frame 0 decodes to 48x32.*96x64.*Re-index"):
        vidloader.decode_frames(path, [0, 5], index_record=index[1])


@pytest.fixture
def fake_nvdec(monkeypatch):
    return _fake_nvc.install_on_cpu(monkeypatch)


def test_nvdec_path_refuses_pictures_of_another_size(swapped, fake_nvdec):
    """On the device this was first an untyped RuntimeError from reshaping the smaller surface;
    then, with the surface checked, real NVDEC (configured for the indexed size) decoded the
    smaller pictures into the larger surface and delivered them: the demuxer's open compares
    the container's picture size with the index before any packet goes to NVDEC."""
    from vidloader.decoding import DecodeTask
    from vidloader.decoding.nvdec._executor import NvdecExecutor

    index, _ = swapped
    ex = NvdecExecutor(num_decoders=1, frame_cache_bytes=0, packet_cache_bytes=0)
    try:
        with pytest.raises(vidloader.CorruptVideoError,
                           match=r"v1\.mp4: its pictures are 48x32, the index records 96x64.*Re-index"):
            ex.decode(DecodeTask.for_frames(1, index[1], range(20)), lambda i, f: None)
    finally:
        ex.close()


@pytest.mark.parametrize("fallback", ["cpu", "error"])
def test_nvdec_loader_skips_a_swapped_file_once(swapped, fake_nvdec, fallback):
    index, path = swapped
    loader = vidloader.VideoLoader(index, batch_size=8, num_workers=0, backend="nvdec", device="cpu",
                                   on_error="skip", fallback=fallback,
                                   sampler=vidloader.RandomFrames(seed=0))
    seen = [(int(v), int(f)) for b in loader for v, f in zip(b["video_index"], b["frame_index"])]
    assert sorted(seen) == [(v, f) for v in (0, 2) for f in range(20)]
    assert loader.stats["skipped_samples"] == 20
    assert loader.stats["skipped_files"] == [str(path)]


@pytest.mark.cuda
@pytest.mark.parametrize("num_workers", [0, 2])
def test_real_nvdec_skips_a_swapped_file_once(swapped, num_workers):
    """The device run of issue 17 item 7: the epoch died with an untyped RuntimeError."""
    index, path = swapped
    loader = vidloader.VideoLoader(index, batch_size=8, num_workers=num_workers, backend="nvdec",
                                   on_error="skip", fallback="error",
                                   sampler=vidloader.RandomFrames(seed=0))
    seen = [(int(v), int(f)) for b in loader for v, f in zip(b["video_index"], b["frame_index"])]
    assert sorted(seen) == [(v, f) for v in (0, 2) for f in range(20)]
    assert loader.stats["skipped_files"] == [str(path)]


def test_open_gop_files_decode_exactly_with_error_detection_on(tmp_path):
    """An open-GOP H.264 file (as cameras and broadcast write them) is valid: after a seek,
    FFmpeg logs reference-management errors for pictures from before the keyframe, which are
    no damage. Random frames must equal a full decode, never a CorruptVideoError (found by
    review: every GOP but the first failed)."""
    import av

    import vidloader

    path = tmp_path / "open_gop.mp4"
    with av.open(str(path), "w") as out:
        s = out.add_stream("libx264", rate=25)
        s.width, s.height, s.pix_fmt = 128, 96, "yuv420p"
        s.options = {"x264-params": "open-gop=1:keyint=12:min-keyint=12:bframes=3:b-adapt=0:scenecut=0"}
        for i in range(60):
            img = np.zeros((96, 128, 3), np.uint8)
            img[:, :, 0] = (i * 4) % 255
            img[(i * 3) % 96, :, 1] = 255
            img[:, (i * 5) % 128, 2] = 255
            for p in s.encode(av.VideoFrame.from_ndarray(img, format="rgb24")):
                out.mux(p)
        for p in s.encode():
            out.mux(p)
    with av.open(str(path)) as c:
        ref = np.stack([f.to_ndarray(format="rgb24") for f in c.decode(video=0)])
    record = vidloader.build_index([path], num_workers=0, progress=False)[0]
    for frames in ([12, 13, 14], [24, 25], [36], [40, 41], [5], [50, 51, 59]):
        got = vidloader.decode_frames(path, frames, index_record=record).numpy()
        np.testing.assert_array_equal(got, ref[frames])


def test_a_file_trimmed_by_its_edit_list_is_indexed_and_flagged(tmp_path):
    """An MP4 remuxed with its first 90 of 300 frames cut by an edit list (a non-destructive
    trim): the sample table states 300 frames, FFmpeg demuxes the 210 shown. Valid: indexed
    with a warning, not rejected as a damaged moov (found by review)."""
    import av

    import vidloader

    src, dst = tmp_path / "src.mp4", tmp_path / "trimmed.mp4"
    with av.open(str(src), "w") as out:
        s = out.add_stream("libx264", rate=25)
        s.width, s.height, s.pix_fmt = 64, 48, "yuv420p"
        s.options = {"x264-params": "keyint=30:min-keyint=30:bframes=0:scenecut=0"}
        for i in range(300):
            img = np.full((48, 64, 3), i % 255, np.uint8)
            for p in s.encode(av.VideoFrame.from_ndarray(img, format="rgb24")):
                out.mux(p)
        for p in s.encode():
            out.mux(p)
    with av.open(str(src)) as inp, av.open(str(dst), "w") as o:
        ist = inp.streams.video[0]
        ost = o.add_stream_from_template(ist)
        shift = 90 * 512  # 90 frames in the 1/12800 time base: a negative start, an edit list
        for p in inp.demux(ist):
            if p.size:
                p.pts, p.dts, p.stream = p.pts - shift, p.dts - shift, ost
                o.mux(p)
    index = vidloader.build_index([dst], num_workers=0, progress=False)
    assert len(index) == 1 and not index.rejected
    assert index[0].num_frames == 210 and "edit list shows 210" in index[0].warning


def test_nvdec_plane_check_refuses_a_surface_smaller_than_the_index():
    """The second line of defence behind the demuxer's size check (a stream whose picture size
    changes mid-stream): planes exported without DLPack are checked before any reshape."""
    from types import SimpleNamespace

    from vidloader.decoding.nvdec._decoder import _check_plane_bytes

    def plane(h, w):
        return SimpleNamespace(__cuda_array_interface__={"shape": (h, w), "typestr": "|u1"})

    _check_plane_bytes([plane(64, 96), plane(32, 96)], 64, 96, 96, 1, "v.mp4")
    with pytest.raises(vidloader.CorruptVideoError, match=r"v\.mp4: NVDEC decoded a picture of 48x32 samples, "
                                                          r"smaller than the 96x64"):
        _check_plane_bytes([plane(32, 48), plane(16, 48)], 64, 96, 96, 1, "v.mp4")


# ---------------------------------------------------- a file rewritten under a running loader

@pytest.mark.parametrize("backend", ["cpu", "nvdec"])
def test_a_file_rewritten_in_place_under_a_running_loader_is_skipped_not_misread(tmp_path, backend,
                                                                                  monkeypatch):
    """Item 7: a file rewritten in place (same inode) while the loader holds it open used to
    be read through the open handle under the old frame table (the stat check ran at open
    only). Every delivered frame must be the indexed file's; the rest of that file is skipped,
    counted and named once."""
    import collections

    if backend == "nvdec":
        from . import _fake_nvc

        _fake_nvc.install_on_cpu(monkeypatch)
    paths = [_video(tmp_path / f"v{i}.mp4", seed=40 + i, frames=20) for i in range(3)]
    index = build_index(paths, num_workers=0, progress=False)
    refs = {v: reference_frames(str(p)) for v, p in enumerate(paths)}
    other = make_video(tmp_path / "other.mp4", VideoSpec(width=96, height=64, num_frames=20, gop=10,
                                                         bframes=2, seed=99)).read_bytes()
    loader = vidloader.VideoLoader(index, batch_size=4, num_workers=0, backend=backend, lookahead=1,
                                   prefetch=1, on_error="skip", fallback="error",
                                   sampler=vidloader.SequentialFrames(),
                                   **({"device": "cpu"} if backend == "nvdec" else {}))
    seen = []
    for batch in loader:
        seen += [(int(v), int(f), img.numpy()) for v, f, img in
                 zip(batch["video_index"], batch["frame_index"], batch["frames"])]
        if len(seen) == 24:  # four frames into video 1, which the decoder now holds open
            with open(paths[1], "r+b") as f:  # the same inode, other content, another size
                f.write(other)
                f.truncate()
    for v, f, img in seen:  # never another file's pixels (NVDEC's NV12 kernels: within 6 of swscale)
        diff = np.abs(img.astype(int) - refs[v][f].astype(int))
        assert (diff.max() == 0) if backend == "cpu" else (diff.mean() < 2 and diff.max() <= 6), (v, f)
    delivered = collections.Counter(v for v, _, _ in seen)
    assert delivered[0] == delivered[2] == 20 and 4 <= delivered[1] < 20
    assert loader.stats["skipped_samples"] == 20 - delivered[1]
    assert loader.stats["skipped_files"] == [str(paths[1])]
