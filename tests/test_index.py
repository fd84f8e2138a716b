"""Tests of the index layer: probing, building, storing, NVIDIA JSON, machine description."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import time
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest

from vidloader._utils._sysinfo import describe_machine, format_machine
from vidloader.errors import CorruptVideoError, IndexFormatError, VideoNotFoundError
from vidloader.index import RejectedVideo, VideoIndex, VideoRecord, build_index, probe_video
from vidloader.index._build import _probe_all
from vidloader.index._nvjson import from_nvidia_json, to_nvidia_json, write_nvidia_json
from vidloader.index._store import load_index, save_index
from vidloader.synthetic import VideoSpec, make_video

from .media import make_rotated_video

SMALL = {"width": 64, "height": 48}

# name -> spec of the session's good videos (tiny, so encoding all of them takes ~1 s)
GOOD_SPECS = {
    "h264_gop10.mp4": VideoSpec(**SMALL, num_frames=40, gop=10, bframes=2),
    "h264_gop30.mp4": VideoSpec(**SMALL, num_frames=60, gop=30, bframes=3, seed=1),
    "hevc.mp4": VideoSpec(codec="hevc", **SMALL, num_frames=30, gop=10, bframes=2),
    "odd_444.mkv": VideoSpec(width=161, height=119, pix_fmt="yuv444p", num_frames=20, gop=10),
    "audio.mp4": VideoSpec(**SMALL, num_frames=30, gop=10, audio=True),
    "vfr.mp4": VideoSpec(**SMALL, num_frames=40, gop=10, vfr=True, seed=2),
    "ten_bit.mov": VideoSpec(**SMALL, num_frames=20, gop=10, pix_fmt="yuv420p10le"),
    "av1.mp4": VideoSpec(codec="av1", **SMALL, num_frames=20, gop=10),
    "vp9.webm": VideoSpec(codec="vp9", **SMALL, num_frames=20, gop=10),
}


def _record_fields(record: VideoRecord) -> dict:
    return {f.name: getattr(record, f.name) for f in dataclasses.fields(record)}


def assert_same_record(a: VideoRecord, b: VideoRecord) -> None:
    fa, fb = _record_fields(a), _record_fields(b)
    for name in ("pts", "keyframes"):
        np.testing.assert_array_equal(fa.pop(name), fb.pop(name), err_msg=f"{a.path}: {name}")
    assert fa == fb


def assert_same_index(a: VideoIndex, b: VideoIndex) -> None:
    assert len(a) == len(b)
    for ra, rb in zip(a, b):
        assert_same_record(ra, rb)
    assert a.rejected == b.rejected


def _faststart_copy(src: Path, dst: Path) -> Path:
    """Remux ``src`` with the ``moov`` box first, so a truncated copy still opens."""
    with av.open(str(src)) as inp, av.open(str(dst), "w", options={"movflags": "faststart"}) as out:
        stream = out.add_stream_from_template(inp.streams.video[0])
        for packet in inp.demux(inp.streams.video[0]):
            if packet.size:
                packet.stream = stream
                out.mux(packet)
    return dst


@pytest.fixture(scope="session")
def media(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("index_media")
    paths = {name: make_video(root / name, spec) for name, spec in GOOD_SPECS.items()}
    for degrees in (90, 270):
        paths[f"rot{degrees}.mp4"] = make_rotated_video(root / f"rot{degrees}.mp4", degrees)
    return paths


@pytest.fixture(scope="session")
def bad_files(tmp_path_factory, media) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("index_bad")
    data = media["h264_gop10.mp4"].read_bytes()  # moov at the end: a cut copy cannot open
    faststart = _faststart_copy(media["h264_gop10.mp4"], root / "faststart.tmp.mp4")
    fs_data = faststart.read_bytes()
    faststart.unlink()
    files = {
        "empty": (root / "empty.mp4", b""),
        "truncated": (root / "truncated.mp4", data[: len(data) // 2]),
        "truncated_faststart": (root / "truncated_faststart.mp4", fs_data[: len(fs_data) * 2 // 3]),
        "text": (root / "notes.mp4", b"this is a text file, not a video\n" * 20),
        "random": (root / "noise.mkv", np.random.default_rng(0).bytes(200_000)),
    }
    for path, content in files.values():
        path.write_bytes(content)
    return {name: path for name, (path, _) in files.items()}


def reference_decode(path: Path) -> tuple[list[int], list[int]]:
    """pts of every frame of a full decode, in display order, and the key frames' indices."""
    with av.open(str(path)) as container:
        frames = sorted(container.decode(video=0), key=lambda f: f.pts)
    return [f.pts for f in frames], [i for i, f in enumerate(frames) if f.key_frame]


# ---------------------------------------------------------------- probe: good files


@pytest.mark.parametrize("name,gop", [("h264_gop10.mp4", 10), ("h264_gop30.mp4", 30)])
def test_probe_h264_with_bframes(media, name, gop):
    spec = GOOD_SPECS[name]
    r = probe_video(media[name])
    assert r.path == os.path.abspath(media[name])
    assert (r.codec, r.width, r.height, r.pix_fmt, r.bit_depth) == ("h264", 64, 48, "yuv420p", 8)
    assert r.num_frames == spec.num_frames == len(r.pts)
    np.testing.assert_array_equal(r.keyframes, np.arange(0, spec.num_frames, gop))
    assert r.keyframes.dtype == np.int64 and r.pts.dtype == np.int64
    assert np.all(np.diff(r.pts) > 0)
    assert r.fps == pytest.approx(30.0, rel=1e-6)
    assert isinstance(r.time_base, Fraction)
    assert r.size_bytes == os.path.getsize(media[name])
    assert (r.rotation, r.stream_index) == (0, 0)
    assert r.color_range in {"tv", "pc", "unknown"}


@pytest.mark.parametrize("name", sorted(GOOD_SPECS))
def test_pts_and_keyframes_match_a_full_decode(media, name):
    """The contract: frame i of the index is frame i of a full decode sorted by pts."""
    r = probe_video(media[name])
    pts, keys = reference_decode(media[name])
    assert r.pts.tolist() == pts
    assert r.keyframes.tolist() == keys


def test_probe_hevc(media):
    r = probe_video(media["hevc.mp4"])
    assert (r.codec, r.num_frames, r.keyframes.tolist()) == ("hevc", 30, [0, 10, 20])
    assert r.fps == pytest.approx(30.0)


def test_probe_odd_size_444(media):
    r = probe_video(media["odd_444.mkv"])
    assert (r.width, r.height, r.pix_fmt, r.num_frames) == (161, 119, "yuv444p", 20)


def test_probe_counts_only_video_frames_with_audio(media):
    r = probe_video(media["audio.mp4"])
    assert r.num_frames == 30
    with av.open(str(media["audio.mp4"])) as c:
        assert len(c.streams.audio) == 1
        assert r.stream_index == c.streams.video[0].index


def test_probe_variable_frame_rate(media):
    spec = GOOD_SPECS["vfr.mp4"]
    r = probe_video(media["vfr.mp4"])
    assert r.num_frames == spec.num_frames
    assert len(set(np.diff(r.pts).tolist())) > 1  # irregular steps
    last_step = r.pts[-1] - r.pts[-2]  # the muxer gives the last frame the previous step
    duration = float((r.pts[-1] - r.pts[0] + last_step) * r.time_base)
    assert r.fps == pytest.approx(r.num_frames / duration, rel=0.05)


def test_probe_bit_depth_10(media):
    r = probe_video(media["ten_bit.mov"])
    assert (r.pix_fmt, r.bit_depth) == ("yuv420p10le", 10)


def test_probe_records_what_decides_hardware_decodability(media):
    """Codec (named as the codec, never as the decoder library: AV1 opens with libdav1d),
    profile, bit depth, chroma format and the coded size (H.264 codes 16x16 macroblocks)."""
    expected = {
        "h264_gop10.mp4": ("h264", "High", 8, "420", 64, 48),
        "hevc.mp4": ("hevc", "Main", 8, "420", 64, 48),
        "ten_bit.mov": ("h264", "High 10", 10, "420", 64, 48),
        "odd_444.mkv": ("h264", "High 4:4:4 Predictive", 8, "444", 176, 128),
        "av1.mp4": ("av1", "Main", 8, "420", 64, 48),
        "vp9.webm": ("vp9", "Profile 0", 8, "420", 64, 48),
    }
    for name, want in expected.items():
        r = probe_video(media[name])
        got = (r.codec, r.profile, r.bit_depth, r.chroma_format, r.coded_width, r.coded_height)
        assert got == want, name


def test_record_derives_chroma_format_and_coded_size():
    base = dict(path="/v.mp4", width=1920, height=1080, bit_depth=8, rotation=0, fps=30.0,
                time_base=Fraction(1, 30), num_frames=1, keyframes=np.zeros(1, np.int64),
                pts=np.zeros(1, np.int64))
    h264 = VideoRecord(codec="h264", pix_fmt="yuv420p", **base)
    assert (h264.chroma_format, h264.coded_width, h264.coded_height) == ("420", 1920, 1088)
    hevc = VideoRecord(codec="hevc", pix_fmt="yuv422p10le", **base)
    assert (hevc.chroma_format, hevc.coded_width, hevc.coded_height) == ("422", 1920, 1080)
    given = VideoRecord(codec="hevc", pix_fmt="gray", coded_width=1920, coded_height=1088, **base)
    assert (given.chroma_format, given.coded_height) == ("400", 1088)


@pytest.mark.parametrize("degrees", [90, 270])
def test_probe_rotation_matches_decoded_frames(media, degrees):
    path = media[f"rot{degrees}.mp4"]
    assert probe_video(path).rotation == degrees
    with av.open(str(path)) as c:
        assert next(c.decode(video=0)).rotation % 360 == degrees


def test_probe_accepts_pathlike_and_relative(media, monkeypatch):
    monkeypatch.chdir(media["hevc.mp4"].parent)
    assert probe_video(Path("hevc.mp4")).path == os.path.abspath(media["hevc.mp4"])


# ---------------------------------------------------------------- probe: bad files


@pytest.mark.parametrize("name", ["empty", "truncated", "truncated_faststart", "text", "random"])
def test_probe_bad_file_raises_corrupt(bad_files, name):
    path = bad_files[name]
    with pytest.raises(CorruptVideoError) as info:
        probe_video(path)
    assert str(path) in str(info.value)
    assert info.value.path == str(path)
    assert isinstance(info.value, ValueError)


def test_probe_missing_file(tmp_path):
    path = tmp_path / "nope.mp4"
    with pytest.raises(VideoNotFoundError, match="nope.mp4") as info:
        probe_video(path)
    assert isinstance(info.value, FileNotFoundError)


def test_probe_directory_is_rejected(tmp_path):
    with pytest.raises(CorruptVideoError, match="not a regular file"):
        probe_video(tmp_path)


def test_probe_file_without_video_stream(tmp_path):
    path = tmp_path / "audio_only.m4a"
    with av.open(str(path), "w") as out:
        stream = out.add_stream("aac", rate=44100)
        stream.layout = "mono"
        silence = np.zeros((1, 1024), np.float32)
        frame = av.AudioFrame.from_ndarray(silence, format="fltp", layout="mono")
        frame.sample_rate = 44100
        out.mux(stream.encode(frame))
        out.mux(stream.encode(None))
    with pytest.raises(CorruptVideoError, match="no video stream"):
        probe_video(path)


# ---------------------------------------------------------------- build_index


@pytest.fixture(scope="session")
def mixed_dir(tmp_path_factory, media, bad_files) -> Path:
    """Good and bad files together, one of each in a sub-directory, plus files to ignore."""
    root = tmp_path_factory.mktemp("mixed")
    for name in ("h264_gop10.mp4", "hevc.mp4", "odd_444.mkv"):
        (root / name).write_bytes(media[name].read_bytes())
    (root / "sub").mkdir()
    (root / "sub" / "VFR.MP4").write_bytes(media["vfr.mp4"].read_bytes())  # case-insensitive ext
    for name in ("empty", "text", "truncated"):
        (root / bad_files[name].name).write_bytes(bad_files[name].read_bytes())
    (root / "sub" / "noise.mkv").write_bytes(bad_files["random"].read_bytes())
    (root / "readme.txt").write_text("not indexed: wrong extension")
    return root


def test_build_index_mixed_directory(mixed_dir, caplog):
    with caplog.at_level(logging.WARNING, logger="vidloader.index"):
        index = build_index(mixed_dir, num_workers=0, progress=False)
    good = ["h264_gop10.mp4", "hevc.mp4", "odd_444.mkv", "sub/VFR.MP4"]
    assert index.paths == [str(mixed_dir / n) for n in good]
    bad = {os.path.relpath(r.path, mixed_dir): r.reason for r in index.rejected}
    assert sorted(bad) == ["empty.mp4", "notes.mp4", "sub/noise.mkv", "truncated.mp4"]
    assert "empty" in bad["empty.mp4"]
    assert all(reason for reason in bad.values())
    assert any("4 of 8 files rejected" in m for m in caplog.messages)


def test_build_index_workers_give_identical_results(mixed_dir):
    t0 = time.perf_counter()
    in_process = build_index(mixed_dir, num_workers=0, progress=False)
    pooled = build_index(mixed_dir, num_workers=2, progress=False)
    assert time.perf_counter() - t0 < 60  # nothing hangs
    assert_same_index(in_process, pooled)


def test_build_index_non_recursive_and_explicit_paths(mixed_dir, media, tmp_path):
    flat = build_index(mixed_dir, num_workers=0, progress=False, recursive=False)
    assert not any("/sub/" in p for p in flat.paths + [r.path for r in flat.rejected])
    renamed = tmp_path / "clip.bin"  # explicit files are probed whatever their extension
    renamed.write_bytes(media["hevc.mp4"].read_bytes())
    missing = tmp_path / "missing.mp4"
    index = build_index([media["odd_444.mkv"], missing, renamed], num_workers=0, progress=False)
    assert index.paths == sorted([str(media["odd_444.mkv"]), str(renamed)])
    assert index.rejected == [RejectedVideo(str(missing), "no such file or directory")]


def _crashing_probe(path: str) -> VideoRecord:
    """Probe that kills its process on one file, as an FFmpeg segfault would."""
    if "crash" in os.path.basename(path):
        os._exit(3)
    return probe_video(path)


def test_build_survives_a_crashing_worker(media, tmp_path):
    files = []
    for i in range(8):
        files.append(tmp_path / f"v{i}.mp4")
        files[-1].write_bytes(media["hevc.mp4"].read_bytes())
    files.insert(4, tmp_path / "v3_crash.mp4")
    files[4].write_bytes(b"x")
    results = _probe_all([str(f) for f in files], 2, False, probe=_crashing_probe)
    kinds = [type(r).__name__ for r in results]
    assert kinds == ["VideoRecord"] * 4 + ["RejectedVideo"] + ["VideoRecord"] * 4
    assert "crashed" in results[4].reason and results[4].path == str(files[4])


# ---------------------------------------------------------------- save / load


@pytest.fixture(scope="session")
def small_index(media) -> VideoIndex:
    index = build_index(list(media.values()), num_workers=0, progress=False)
    index.rejected.append(RejectedVideo("/data/bad é.mp4", "the file is empty (0 bytes)"))
    return index


@pytest.mark.parametrize("filename", ["videos.index", "videos.npz"])
def test_save_load_roundtrip(small_index, tmp_path, filename):
    path = tmp_path / filename
    small_index.save(path)
    assert os.listdir(tmp_path) == [filename]  # exactly that name, no temp file left
    loaded = VideoIndex.load(path, allow_outside_root=True)  # the media live elsewhere
    assert_same_index(small_index, loaded)
    assert all(r.pts.base is not None for r in loaded)  # views of the flat column
    assert loaded[0].keyframe_before(loaded[0].num_frames - 1) == loaded[0].keyframes[-1]


def test_save_load_empty_index(tmp_path):
    save_index(VideoIndex([]), tmp_path / "empty.idx")
    loaded = load_index(tmp_path / "empty.idx")
    assert len(loaded) == 0 and loaded.rejected == []


def _rewrite_header(src: Path, dst: Path, **changes) -> Path:
    with np.load(src, allow_pickle=False) as npz:
        arrays = {k: npz[k] for k in npz.files}
    header = json.loads(str(arrays["header"]))
    header.update(changes)
    arrays["header"] = np.array(json.dumps(header))
    with open(dst, "wb") as f:
        np.savez(f, **arrays)
    return dst


def test_an_index_inside_its_dataset_folder_moves_with_it(tmp_path):
    """Paths under the index file's folder are stored relative to it, so the folder can be
    moved or mounted elsewhere; a video outside it keeps its absolute path."""
    import shutil

    import vidloader

    from .media import make_small_dataset

    outside = make_small_dataset(tmp_path / "elsewhere", n=1)[0]
    videos = make_small_dataset(tmp_path / "ds" / "videos", n=2)
    index = build_index([*videos, outside], num_workers=0, progress=False)
    index.save(tmp_path / "ds" / "index.idx")
    with np.load(tmp_path / "ds" / "index.idx", allow_pickle=False) as npz:
        stored = npz["path"].tolist()
    assert stored[:2] == [os.path.join("videos", p.name) for p in videos]
    assert stored[2] == str(outside)
    shutil.move(tmp_path / "ds", tmp_path / "moved")
    loaded = VideoIndex.load(tmp_path / "moved" / "index.idx", allow_outside_root=[outside.parent])
    assert loaded.paths[:2] == [str(tmp_path / "moved" / "videos" / p.name) for p in videos]
    assert loaded.paths[2] == str(outside)
    frames = vidloader.decode_frames(loaded.paths[1], [0, 3], index_record=loaded[1])
    assert frames.shape[0] == 2


def test_version_1_indexes_with_absolute_paths_still_load(small_index, tmp_path):
    current = tmp_path / "current.idx"
    save_index(small_index, current)
    with np.load(current, allow_pickle=False) as npz:
        arrays = {k: npz[k] for k in npz.files}
    arrays["path"] = np.array(small_index.paths)  # version 1 stored every path absolute
    with open(tmp_path / "v1.idx", "wb") as f:
        np.savez(f, **arrays)
    v1 = _rewrite_header(tmp_path / "v1.idx", tmp_path / "v1.idx", version=1)
    assert_same_index(small_index, load_index(v1, allow_outside_root=True))


def test_version_2_indexes_load_with_decodability_derived(small_index, tmp_path):
    """Version 2 had no profile, chroma format or coded size, and stored the decoder's name
    as the codec (libdav1d for AV1): it loads with the profile unknown, the others derived,
    and codec names mapped to the codec."""
    current = tmp_path / "current.idx"
    save_index(small_index, current)
    with np.load(current, allow_pickle=False) as npz:
        arrays = {k: npz[k] for k in npz.files if k not in ("profile", "chroma_format", "coded_width", "coded_height", "mtime_ns")}
    arrays["codec"] = np.array(["libdav1d" if c == "av1" else c for c in arrays["codec"].tolist()])
    with open(tmp_path / "v2.idx", "wb") as f:
        np.savez(f, **arrays)
    loaded = load_index(_rewrite_header(tmp_path / "v2.idx", tmp_path / "v2.idx", version=2),
                        allow_outside_root=True)
    assert "av1" in {r.codec for r in loaded}
    for a, b in zip(small_index, loaded):
        assert b.profile == ""
        assert_same_record(dataclasses.replace(a, profile="", mtime_ns=0), b)


def test_load_rejects_other_versions_and_formats(small_index, tmp_path):
    good = tmp_path / "good.idx"
    save_index(small_index, good)
    newer = _rewrite_header(good, tmp_path / "newer.idx", version=999)
    with pytest.raises(IndexFormatError, match=r"newer.idx.*version 999.*versions 1, 2, 3, 4"):
        load_index(newer)
    other = _rewrite_header(good, tmp_path / "other.idx", format="something-else")
    with pytest.raises(IndexFormatError, match="something-else"):
        load_index(other)


def test_load_rejects_files_that_are_not_an_index(tmp_path):
    garbage = tmp_path / "garbage.idx"
    garbage.write_bytes(np.random.default_rng(1).bytes(5000))
    plain_npz = tmp_path / "plain.npz"
    np.savez(plain_npz, x=np.arange(3))
    npy = tmp_path / "array.npy"
    np.save(npy, np.arange(3))
    empty = tmp_path / "empty.idx"
    empty.write_bytes(b"")
    for path in (garbage, plain_npz, npy, empty):
        with pytest.raises(IndexFormatError, match=path.name):
            load_index(path)
    with pytest.raises(FileNotFoundError):
        load_index(tmp_path / "missing.idx")


def _synthetic_index(num_videos: int, frames: int) -> VideoIndex:
    """Records built directly; pts are views of one array so building costs ~nothing."""
    flat = np.arange(num_videos * frames, dtype=np.int64) * 512
    keyframes = np.arange(0, frames, 30, dtype=np.int64)
    tb = Fraction(1, 15360)
    records = [
        VideoRecord(
            path=f"/data/shard_{i // 1000:03d}/clip_{i:07d}.mp4", codec="hevc" if i % 3 else "h264",
            width=640 + i % 7, height=360, pix_fmt="yuv420p", bit_depth=8, rotation=90 * (i % 4),
            fps=30.0 - i % 2 * 0.03, time_base=tb, num_frames=frames, keyframes=keyframes,
            pts=flat[i * frames : (i + 1) * frames], color_space="bt709", color_range="tv",
            stream_index=i % 2, size_bytes=1_000_000 + i,
        )
        for i in range(num_videos)
    ]
    return VideoIndex(records, [RejectedVideo("/data/bad.mp4", "truncated")])


def test_load_100k_videos(tmp_path):
    """A 100k-video index round-trips. (Its load time is a benchmark's business, not a
    test's: a 2 s bound here failed at 2.5 s on a 2-core machine busy with other tests. The
    bound below only catches a load gone quadratic.)"""
    index = _synthetic_index(100_000, 300)
    path = tmp_path / "big.idx"
    save_index(index, path)
    t0 = time.perf_counter()
    loaded = load_index(path, allow_outside_root=True)
    elapsed = time.perf_counter() - t0
    assert elapsed < 60.0, f"loading 100k videos took {elapsed:.2f} s"
    assert len(loaded) == 100_000 and loaded.total_frames == 30_000_000
    for k in (0, 1, 54_321, 99_999):
        assert_same_record(index[k], loaded[k])
    assert loaded.rejected == index.rejected


# ---------------------------------------------------------------- NVIDIA JSON


@pytest.fixture(scope="session")
def camera_layout(tmp_path_factory) -> Path:
    """2 video dirs x 2 clips x 2 cameras; the back camera has 2 frames more than the front."""
    root = tmp_path_factory.mktemp("nv")
    for d in range(2):
        for c in range(2):
            for cam, extra in (("CAM_FRONT", 0), ("CAM_BACK", 2)):
                spec = VideoSpec(**SMALL, num_frames=20 + 4 * c + extra, gop=10, seed=d * 10 + c)
                make_video(root / f"videos_{d}" / f"clip_{c}" / f"{cam}.mp4", spec)
    return root


def test_nvidia_json_roundtrip(camera_layout, tmp_path, caplog):
    index = build_index(camera_layout, num_workers=0, progress=False)
    assert len(index) == 8
    mapping = to_nvidia_json(index)
    assert mapping == {
        os.path.join(str(camera_layout / f"videos_{d}"), ""): {"clip_0": 20, "clip_1": 24}
        for d in range(2)
    }
    path = tmp_path / "index_frame.json"
    write_nvidia_json(index, path)
    assert json.loads(path.read_text()) == mapping
    with caplog.at_level(logging.WARNING, logger="vidloader.index"):
        rebuilt = from_nvidia_json(path, num_workers=0, progress=False, allow_outside_root=True)
    assert_same_index(index, rebuilt)
    assert not caplog.messages


def test_nvidia_json_count_mismatch_and_missing_clip(camera_layout, caplog):
    mapping = to_nvidia_json(build_index(camera_layout, num_workers=0, progress=False))
    first = next(iter(mapping))
    mapping[first]["clip_1"] = 99
    mapping[first]["clip_gone"] = 5
    with caplog.at_level(logging.WARNING, logger="vidloader.index"):
        index = VideoIndex.from_nvidia_json(mapping, num_workers=0, progress=False,
                                            allow_outside_root=True)
    assert len(index) == 8
    assert [os.path.basename(r.path) for r in index.rejected] == ["clip_gone"]
    text = "\n".join(caplog.messages)
    assert "clip_1" in text and "99" in text and "24" in text
    assert "clip_gone" in text


def test_nvidia_json_single_file_clips(media, tmp_path):
    video_dir = tmp_path / "flat"
    video_dir.mkdir()
    (video_dir / "scene_a.mp4").write_bytes(media["h264_gop10.mp4"].read_bytes())
    index = build_index(video_dir, num_workers=0, progress=False)
    mapping = to_nvidia_json(index, layout="files")
    assert mapping == {os.path.join(str(video_dir), ""): {"scene_a": 40}}
    rebuilt = from_nvidia_json(mapping, num_workers=0, progress=False, allow_outside_root=[tmp_path])
    assert rebuilt.paths == index.paths


# ---------------------------------------------------------------- machine description


def test_describe_machine():
    info = describe_machine()
    assert info["logical_cores"] >= 1 and info["ram_bytes"] > 0
    assert info["av"] == av.__version__
    assert isinstance(info["gpus"], list)
    text = format_machine(info)
    assert "CPU:" in text and "GPU:" in text and info["python"] in text
