"""CPU decoding: frame exactness against a full reference decode, executor behaviour, errors.

Media are small synthetic videos (vidloader.synthetic) made once per session. Every decode
is bounded by the file size (no network, no retries without limit), and the bad-file tests
run under a thread deadline so that a hang fails instead of blocking the suite.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import threading
from pathlib import Path

import av
import numpy as np
import pytest

from vidloader.decoding import CpuExecutor, DecodeTask, decode_frames, get_executor
from vidloader.decoding.cpu._executor import media_error
from vidloader.decoding.cpu._frame import swscale_flags
from vidloader.errors import (
    ConfigError,
    CorruptVideoError,
    FrameIndexError,
    StaleIndexError,
    UnsupportedCodecError,
    VideoNotFoundError,
)
from vidloader.index import probe_video
from vidloader.planning import plan_tasks_for_frames
from vidloader.synthetic import VideoSpec, make_video

SPECS = {
    "h264_b2_gop10": VideoSpec(width=96, height=64, num_frames=60, gop=10, bframes=2, seed=1),
    "h264_b3_gop30": VideoSpec(width=64, height=48, num_frames=90, gop=30, bframes=3, seed=2),
    "h264_nob_gop10": VideoSpec(width=64, height=48, num_frames=40, gop=10, bframes=0, seed=3),
    "h264_intra": VideoSpec(width=64, height=48, num_frames=30, gop=1, bframes=0, seed=4),
    "h264_gop250": VideoSpec(width=64, height=48, num_frames=60, gop=250, bframes=2, seed=5),
    "hevc": VideoSpec(codec="hevc", width=64, height=48, num_frames=40, gop=10, bframes=2, seed=6),
    "yuv444_odd": VideoSpec(
        width=161, height=119, num_frames=30, gop=10, bframes=2, pix_fmt="yuv444p", seed=7
    ),
    "audio": VideoSpec(width=176, height=144, num_frames=45, gop=15, bframes=2, audio=True, seed=8),
    "vfr": VideoSpec(width=64, height=48, num_frames=60, gop=10, bframes=2, vfr=True, seed=9),
}


@dataclasses.dataclass
class Ref:
    """A video and its full sequential decode (frames sorted by pts)."""

    path: Path
    frames: list  # av.VideoFrame, display order

    @property
    def rgb(self) -> np.ndarray:
        return np.stack([f.to_ndarray(format="rgb24") for f in self.frames])

    def indices_of(self, pict_type: str) -> np.ndarray:
        return np.array(
            [i for i, f in enumerate(self.frames) if "?IPB"[int(f.pict_type)] == pict_type]
        )


def _full_decode(path: Path) -> list:
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        stream.codec_context.thread_count = 1
        return sorted(container.decode(stream), key=lambda f: f.pts)


@pytest.fixture(scope="session")
def media(tmp_path_factory) -> dict[str, Ref]:
    root = tmp_path_factory.mktemp("decoding_media")
    refs = {}
    for name, spec in SPECS.items():
        path = make_video(root / f"{name}.mp4", spec)
        refs[name] = Ref(path, _full_decode(path))
    mkv = make_video(root / "clip.mkv", SPECS["h264_b2_gop10"])
    refs["mkv"] = Ref(mkv, _full_decode(mkv))
    return refs


@pytest.fixture(scope="session")
def bad_files(tmp_path_factory, media) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("bad_media")
    data = media["mkv"].path.read_bytes()
    truncated = root / "truncated.mkv"  # MKV stays readable when cut: its tail frames vanish
    truncated.write_bytes(data[: len(data) // 2])
    empty = root / "empty.mp4"
    empty.write_bytes(b"")
    text = root / "notes.mp4"
    text.write_text("this is not a video\n" * 20)
    return {"truncated": truncated, "empty": empty, "text": text, "missing": root / "gone.mp4"}


def _index_sets(n: int, ref: Ref, rng: np.random.Generator) -> list[np.ndarray]:
    keyframes = ref.indices_of("I")
    bframes = ref.indices_of("B")
    sets = [
        np.sort(rng.choice(n, size=min(n, 7), replace=False)),  # sorted
        rng.choice(n, size=min(n, 9), replace=False),  # unsorted
        rng.integers(0, n, size=12),  # with duplicates
        np.array([n - 1, 0, n - 1, 0]),  # first and last, repeated
        keyframes[:4],
    ]
    if len(bframes):
        sets.append(rng.permutation(bframes)[:6])
    return sets


@pytest.mark.parametrize("name", [*SPECS, "mkv"])
def test_decode_frames_is_bit_exact(media, name):
    ref = media[name]
    rgb = ref.rgb
    rng = np.random.default_rng(len(name))
    for idx in _index_sets(len(rgb), ref, rng):
        out = decode_frames(ref.path, idx)
        assert out.dtype.is_floating_point is False and out.shape == (len(idx), *rgb.shape[1:])
        np.testing.assert_array_equal(out.numpy(), rgb[idx], err_msg=f"{name} {idx}")


@pytest.mark.parametrize("name", ["h264_b2_gop10", "hevc", "yuv444_odd"])
def test_planes_are_the_native_picture(media, name):
    ref = media[name]
    record = probe_video(ref.path)
    idx = [0, 4, 13, len(ref.frames) - 1]
    got = {}
    with CpuExecutor() as ex:
        ex.decode(
            plan_tasks_for_frames(0, record, idx), lambda i, f: got.__setitem__(i, f.planes())
        )
    for i in idx:
        native = ref.frames[i].to_ndarray()  # yuv420p: planes stacked flat; yuv444p: (3, H, W)
        planes = got[i]
        assert len(planes) == 3 and all(p.dtype == np.uint8 for p in planes)
        if ref.frames[i].format.name == "yuv444p":
            np.testing.assert_array_equal(np.stack(planes), native)
        else:
            flat = np.concatenate([p.ravel() for p in planes])
            np.testing.assert_array_equal(flat, native.ravel())


@pytest.mark.parametrize(
    ("name", "size", "interpolation"),
    [
        ("h264_b2_gop10", (30, 40), "BILINEAR"),
        ("yuv444_odd", (64, 96), "AREA"),
        ("hevc", (97, 131), "BICUBIC"),  # upscale to odd sizes
    ],
)
def test_resize_matches_swscale_reference(media, name, size, interpolation):
    ref = media[name]
    record = probe_video(ref.path)
    idx = [1, 7, len(ref.frames) - 2]
    h, w = size
    got = {}
    with CpuExecutor(interpolation=interpolation) as ex:
        ex.decode(
            plan_tasks_for_frames(0, record, idx), lambda i, f: got.__setitem__(i, f.to_rgb(size))
        )
    for i in idx:
        expected = (
            ref.frames[i]
            .reformat(width=w, height=h, format="rgb24", interpolation=swscale_flags(interpolation))
            .to_ndarray()
        )
        np.testing.assert_array_equal(got[i], expected)
    if interpolation == "BILINEAR":  # the default of decode_frames
        out = decode_frames(ref.path, idx, size=size)
        np.testing.assert_array_equal(out.numpy(), np.stack([got[i] for i in idx]))


@pytest.mark.parametrize(
    ("threads", "thread_type"), [(1, "AUTO"), (4, "FRAME"), (2, "SLICE"), (0, "AUTO")]
)
def test_threading_and_skipping_stay_exact(media, threads, thread_type):
    ref = media["h264_b3_gop30"]
    rgb = ref.rgb
    record = probe_video(ref.path)
    rng = np.random.default_rng(threads)
    with CpuExecutor(thread_count=threads, thread_type=thread_type, skip_nonref=True) as ex:
        for _ in range(6):  # several tasks on one open file: continuation across tasks too
            idx = rng.integers(0, len(rgb), size=5)
            got = {}
            ex.decode(
                plan_tasks_for_frames(0, record, idx), lambda i, f: got.__setitem__(i, f.to_rgb())
            )
            assert sorted(got) == sorted(set(idx.tolist()))
            for i, frame in got.items():
                np.testing.assert_array_equal(frame, rgb[i])
        assert ex.stats.skipped > 0


def _run(ex: CpuExecutor, task: DecodeTask) -> list[int]:
    delivered = []
    ex.decode(task, lambda i, f: delivered.append(i))
    return delivered


def test_consecutive_gops_need_no_seek(media):
    record = probe_video(media["h264_b2_gop10"].path)
    with CpuExecutor() as ex:
        # GOP 0 to its last frame, then GOPs 10 and 20: the decoder just keeps going.
        assert _run(ex, plan_tasks_for_frames(0, record, [8, 9, 12, 19, 21])) == [8, 9, 12, 19, 21]
        assert ex.stats.seeks == 0
    with CpuExecutor() as ex:
        # Non-contiguous GOPs: one seek each (GOP 0 needs none on a freshly opened file).
        assert _run(ex, plan_tasks_for_frames(0, record, [2, 25, 47])) == [2, 25, 47]
        assert ex.stats.seeks == 2


class _SeekLog(CpuExecutor):
    """Records the target of every container seek."""

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.targets: list[int] = []

    def _seek_container(self, video, target):
        self.targets.append(target)
        return super()._seek_container(video, target)


@pytest.mark.parametrize("name", ["h264_b2_gop10", "vfr", "mkv"])
def test_never_seeks_backward_within_a_task(media, name):
    record = probe_video(media[name].path)
    rng = np.random.default_rng(0)
    for _ in range(5):
        ex = _SeekLog()
        idx = rng.choice(record.num_frames, size=8, replace=False)
        task = plan_tasks_for_frames(0, record, idx)
        assert _run(ex, task) == sorted(idx.tolist())
        assert ex.targets == sorted(set(ex.targets)), "a backward (or repeated) seek"
        assert ex.stats.seeks <= len(task.gops)
        ex.close()


def test_skip_nonref_decodes_less_and_stays_exact(media):
    ref = media["h264_b3_gop30"]
    rgb = ref.rgb
    record = probe_video(ref.path)
    wanted = np.setdiff1d(np.arange(len(rgb)), ref.indices_of("B"))  # only I and P frames
    decoded = {}
    for skip in (True, False):
        got = {}
        with CpuExecutor(skip_nonref=skip) as ex:
            ex.decode(
                plan_tasks_for_frames(0, record, wanted),
                lambda i, f: got.__setitem__(i, f.to_rgb()),
            )
            decoded[skip] = ex.stats.decoded
            assert (ex.stats.skipped > 0) == skip
        assert sorted(got) == wanted.tolist()
        for i in wanted:
            np.testing.assert_array_equal(got[i], rgb[i])
    assert decoded[True] < decoded[False]


def test_decoding_stops_at_the_last_wanted_frame(media):
    record = probe_video(media["h264_gop250"].path)  # one GOP spanning the whole video
    for skip in (True, False):
        with CpuExecutor(skip_nonref=skip) as ex:
            assert _run(ex, plan_tasks_for_frames(0, record, [3])) == [3]
            # frames 0..3 plus the B-frame reorder delay, never the whole 60-frame GOP
            assert ex.stats.decoded <= 4 + 3
            assert ex.stats.packets <= 4 + 4
            assert ex.stats.delivered == 1 and ex.stats.tasks == 1


def test_duplicates_are_decoded_once_and_returned_in_order(media):
    ref = media["h264_b2_gop10"]
    rgb = ref.rgb
    idx = [5, 5, 17, 5, 0, 17]
    np.testing.assert_array_equal(decode_frames(ref.path, idx).numpy(), rgb[idx])
    record = probe_video(ref.path)
    with CpuExecutor() as ex:
        assert _run(ex, plan_tasks_for_frames(0, record, idx)) == [0, 5, 17]
        assert ex.stats.delivered == 3


def test_open_files_are_bounded_and_reused(media):
    names = ["h264_b2_gop10", "h264_nob_gop10", "hevc", "vfr"]
    records = [probe_video(media[n].path) for n in names]
    ex = CpuExecutor(max_open_files=2)
    for k, record in enumerate(records):
        assert _run(ex, plan_tasks_for_frames(k, record, [1])) == [1]
        assert len(ex._videos) <= 2
    # Later tasks on the last file continue forward (no seek), even past skipped frames.
    rgb = media["vfr"].rgb
    seeks = ex.stats.seeks
    for i in (2, 3, 4, 5, 6, 7):
        got = {}
        ex.decode(
            plan_tasks_for_frames(3, records[3], [i]), lambda j, f: got.__setitem__(j, f.to_rgb())
        )
        np.testing.assert_array_equal(got[i], rgb[i])
    assert ex.stats.seeks - seeks <= 3  # at most a re-seek where a frame had been skipped
    ex.close()
    assert not ex._videos


def test_two_streams_of_one_file_each_keep_a_reader(media):
    """Requests alternating between two places of one file, each walking forward (two runs
    of the separation example's stream order on one clip): a reader each, so after one seek
    per stream every frame comes by decoding forward, exactly; with one reader per file,
    each switch was a seek and a decode from the keyframe again."""
    ref = media["h264_nob_gop10"]  # without B-frames: a skipped non-reference frame would
    record = probe_video(ref.path)  # cost a re-seek when asked next (W3 has none either)
    ex = CpuExecutor(max_open_files=4, readers_per_file=2)  # as a loader on streams sets it
    seeks = []
    for step in range(20):
        for start in (0, 20):
            i = start + step
            got = {}
            ex.decode(plan_tasks_for_frames(0, record, [i]), lambda j, f: got.__setitem__(j, f.to_rgb()))
            np.testing.assert_array_equal(got[i], ref.rgb[i])
        seeks.append(ex.stats.seeks)
    assert seeks[-1] <= 2, seeks  # a seek per stream
    assert len(ex._videos) == 2  # both readers of the one file are open
    ex.close()
    one = CpuExecutor(max_open_files=4)  # the default: one reader per file, as before
    for step in range(3):
        for start in (0, 20):
            one.decode(plan_tasks_for_frames(0, record, [start + step]), lambda j, f: None)
    assert len(one._videos) == 1 and one.stats.seeks == 5  # every switch but the first open
    one.close()
    with pytest.raises(ConfigError, match="readers_per_file"):
        CpuExecutor(readers_per_file=0)


def test_a_failing_sink_propagates_and_the_executor_recovers(media):
    ref = media["h264_b2_gop10"]
    record = probe_video(ref.path)

    def sink(i, frame):
        raise KeyError(f"sink failed at {i}")

    with CpuExecutor() as ex:
        with pytest.raises(KeyError, match="sink failed at 12"):
            ex.decode(plan_tasks_for_frames(0, record, [12, 13]), sink)
        got = {}
        ex.decode(
            plan_tasks_for_frames(0, record, [13]), lambda i, f: got.__setitem__(i, f.to_rgb())
        )
        np.testing.assert_array_equal(got[13], ref.rgb[13])


def test_empty_request_and_option_errors(media):
    path = media["h264_nob_gop10"].path
    assert tuple(decode_frames(path, []).shape) == (0, 48, 64, 3)
    with pytest.raises(ConfigError, match="cpu.*nvdec"):
        get_executor("vaapi")
    assert isinstance(get_executor("cpu", thread_count=2), CpuExecutor)
    for bad in ({"thread_type": "BOTH"}, {"thread_count": -1}, {"interpolation": "CUBIC"}):
        with pytest.raises(ConfigError):
            CpuExecutor(**bad)


def test_out_of_range_indices_name_the_file(media):
    path = media["h264_nob_gop10"].path
    for idx in ([-1], [0, 40], [10**6]):
        with pytest.raises(FrameIndexError, match=str(path.name)):
            decode_frames(path, idx)


def _within(seconds: float, fn):
    """Run ``fn`` in a thread; fail if it has not finished after ``seconds`` (never hang)."""
    box: dict = {}

    def target():
        try:
            box["value"] = fn()
        except BaseException as exc:  # handed to the caller below
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"still running after {seconds} s"
    if "error" in box:
        raise box["error"]
    return box.get("value")


@pytest.mark.parametrize(
    ("kind", "error"),
    [
        ("empty", CorruptVideoError),
        ("text", CorruptVideoError),
        ("missing", VideoNotFoundError),
    ],
)
def test_bad_files_raise_typed_errors_naming_the_file(media, bad_files, kind, error):
    path = bad_files[kind]
    with pytest.raises(error, match=path.name):
        _within(30, lambda: decode_frames(path, [0]))
    # The executor itself (with a record from a good file, as a stale index would give).
    record = dataclasses.replace(probe_video(media["mkv"].path), path=str(path))
    with CpuExecutor() as ex, pytest.raises(error, match=path.name):
        _within(30, lambda: ex.decode(plan_tasks_for_frames(0, record, [0]), lambda i, f: None))


def test_truncated_file_reports_the_missing_frames(media, bad_files):
    path = bad_files["truncated"]
    full = probe_video(media["mkv"].path)  # the index made before the file was cut
    with pytest.raises(StaleIndexError, match=rf"{path.name}.*size"):
        decode_frames(path, [0], index_record=full)  # the cut is seen at open
    # A cut the size check cannot see (same size and time recorded, e.g. indexed while the
    # file was still being written) is found when the frames are missing.
    st = os.stat(path)
    full = dataclasses.replace(full, size_bytes=st.st_size, mtime_ns=st.st_mtime_ns)
    with pytest.raises(CorruptVideoError, match=rf"{path.name}.*frames 58, 59"):
        _within(30, lambda: decode_frames(path, [0, 58, 59], index_record=full))
    # Frames still in the file decode exactly; the cut file's own index is shorter.
    rgb = media["mkv"].rgb
    np.testing.assert_array_equal(decode_frames(path, [0, 3, 11]).numpy(), rgb[[0, 3, 11]])
    with pytest.raises(FrameIndexError, match=path.name):
        decode_frames(path, [59])


def test_ffmpeg_errors_map_to_typed_errors():
    cases = [
        (av.error.FileNotFoundError(2, "No such file"), VideoNotFoundError),
        (av.error.DecoderNotFoundError(-1, "Decoder not found"), UnsupportedCodecError),
        (av.error.InvalidDataError(-1, "Invalid data"), CorruptVideoError),
    ]
    for exc, expected in cases:
        err = media_error("/data/x.mp4", exc)
        assert isinstance(err, expected) and "/data/x.mp4" in str(err)


def test_importing_decoding_does_not_import_gpu_libraries():
    import vidloader

    code = (
        "import sys, vidloader.decoding, vidloader.planning; "
        "assert 'PyNvVideoCodec' not in sys.modules, 'PyNvVideoCodec imported'"
    )
    src = str(Path(vidloader.__file__).resolve().parents[1])  # the tree under test
    subprocess.run([sys.executable, "-c", code], check=True, env={"PYTHONPATH": src}, timeout=120)
