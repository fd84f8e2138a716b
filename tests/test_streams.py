"""Files with several video streams: ``stream="best" | "first" | int`` picks the one indexed
(recorded as ``VideoRecord.stream_index``), and every path decodes that stream."""

from __future__ import annotations

import av
import numpy as np
import pytest

import vidloader
from vidloader import ConfigError, CorruptVideoError
from vidloader.cli.__main__ import main

# video stream index: (width, height, frames); stream 1 is audio.
_STREAMS = {0: (64, 48, 12), 2: (128, 96, 20)}


def _make_two_video_streams(path, *, default: int | None = None):
    """A Matroska file with two H.264 streams of different sizes and lengths, an audio stream
    between them, and the *default* mark on ``default`` only (``passthrough``: the muxer
    marks nothing by itself). Each stream's frames have their own colours, so a mix-up shows."""
    with av.open(str(path), "w", options={"default_mode": "passthrough"}) as out:
        videos = {}
        for k, (w, h, _) in _STREAMS.items():
            if k == 2:
                audio = out.add_stream("aac", rate=48000, layout="mono")
            s = out.add_stream("libx264", rate=30)
            s.width, s.height, s.pix_fmt = w, h, "yuv420p"
            s.options = {"g": "5", "bf": "1"}
            s.disposition = av.stream.Disposition.default if k == default else 0
            videos[k] = s
        audio.disposition = 0
        silence = av.AudioFrame.from_ndarray(np.zeros((1, 1024), np.float32), format="fltp",
                                             layout="mono")
        silence.sample_rate, silence.pts = 48000, 0
        for packet in [*audio.encode(silence), *audio.encode(None)]:
            out.mux(packet)
        for k, (w, h, n) in _STREAMS.items():
            y, x = np.mgrid[0:h, 0:w]
            for i in range(n):
                pixels = np.stack([x * 255 // w, np.full_like(x, 12 * i + 40 * k), y * 255 // h], -1)
                frame = av.VideoFrame.from_ndarray(pixels.astype(np.uint8), format="rgb24")
                frame.pts = i
                out.mux(videos[k].encode(frame))
            out.mux(videos[k].encode(None))
    return path


def _reference(path, stream_index: int) -> np.ndarray:
    with av.open(str(path)) as c:
        stream = c.streams[stream_index]
        frames = sorted(c.decode(stream), key=lambda f: f.pts)
        return np.stack([f.to_ndarray(format="rgb24") for f in frames])


@pytest.fixture(scope="module")
def two_streams(tmp_path_factory):
    return _make_two_video_streams(tmp_path_factory.mktemp("streams") / "two.mkv")


@pytest.mark.parametrize(("choice", "index", "width", "frames"),
                         [("first", 0, 64, 12), ("best", 2, 128, 20), (2, 2, 128, 20), (0, 0, 64, 12)])
def test_build_index_records_the_chosen_stream(two_streams, tmp_path, choice, index, width, frames):
    idx = vidloader.build_index([two_streams], num_workers=0, progress=False, stream=choice)
    rec = idx[0]
    assert (rec.stream_index, rec.width, rec.num_frames) == (index, width, frames)
    idx.save(tmp_path / "i.npz")
    assert vidloader.VideoIndex.load(tmp_path / "i.npz", allow_outside_root=True)[0].stream_index == index


def test_best_prefers_a_default_stream_unless_another_is_much_larger(tmp_path):
    marked = _make_two_video_streams(tmp_path / "d.mkv", default=0)
    # ffmpeg's score: 64x48 + 5,000,000 (default) beats 128x96.
    assert vidloader.build_index([marked], num_workers=0, progress=False)[0].stream_index == 0


def test_decode_frames_and_the_loader_read_the_chosen_stream(two_streams):
    want = _reference(two_streams, 2)
    got = vidloader.decode_frames(two_streams, [0, 7, 19, 7], stream=2).numpy()
    np.testing.assert_array_equal(got, want[[0, 7, 19, 7]])
    first = vidloader.decode_frames(two_streams, [3], stream="first").numpy()
    np.testing.assert_array_equal(first, _reference(two_streams, 0)[[3]])
    index = vidloader.build_index([two_streams], num_workers=0, progress=False, stream="best")
    loader = vidloader.VideoLoader(index, sampler=vidloader.SequentialFrames(), batch_size=20,
                                   num_workers=0)
    (batch,) = list(loader)
    np.testing.assert_array_equal(batch["frames"].numpy(), want)


def test_a_missing_stream_is_rejected_by_name_and_a_bad_choice_is_a_config_error(two_streams):
    idx = vidloader.build_index([two_streams], num_workers=0, progress=False, stream=1)
    assert len(idx) == 0 and "stream 1 is not a video stream" in idx.rejected[0].reason
    assert "video streams: 0, 2" in idx.rejected[0].reason
    with pytest.raises(CorruptVideoError, match="stream 5 is not a video stream"):
        vidloader.decode_frames(two_streams, [0], stream=5)
    for bad in ("largest", -1, 1.0):
        with pytest.raises(ConfigError, match="stream"):
            vidloader.build_index([two_streams], num_workers=0, progress=False, stream=bad)


def test_info_lists_every_stream_and_marks_the_indexed_one(two_streams, capsys):
    assert main(["info", str(two_streams), "--stream", "first"]) == 0
    out = capsys.readouterr().out
    assert "#0 video h264 64x48  <- indexed" in out
    assert "#1 audio aac" in out and "#2 video h264 128x96\n" in out
    assert main(["info", str(two_streams)]) == 0
    assert "#2 video h264 128x96  <- indexed" in capsys.readouterr().out
