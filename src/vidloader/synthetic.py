"""Deterministic synthetic videos made with PyAV, for the demo, the tests and the benchmarks.

The pictures move (drifting gradients and bouncing boxes) and carry grain, so encoders spend a
realistic number of bits on them and every frame differs from its neighbours: a loader that
returns the wrong frame is caught by comparing pixels.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from fractions import Fraction
from pathlib import Path

import numpy as np

from ._utils._procs import worker_context

_CODEC_LIBS = {"h264": "libx264", "hevc": "libx265", "av1": "libsvtav1", "vp9": "libvpx-vp9"}


@dataclasses.dataclass(frozen=True)
class VideoSpec:
    """What to generate. Sizes are in pixels, durations in frames.

    Attributes:
        codec (str): ``"h264"``, ``"hevc"``, ``"av1"`` (SVT-AV1) or ``"vp9"`` (libvpx).
        width (int), height (int): picture size (odd sizes are allowed with ``yuv444p``).
        num_frames (int): frames to encode.
        fps (int): nominal frame rate.
        gop (int): keyframe interval in frames (fixed: scene-cut detection is off).
        bframes (int): consecutive B-frames allowed (0 for none); H.264 and HEVC only (AV1
            and VP9 reorder with hidden frames instead, which their encoders choose).
        bitrate (int | None): target bits per second; ``None`` uses constant quality (crf 23).
        pix_fmt (str): encoder pixel format (``"yuv420p10le"`` for 10-bit; x265 also encodes
            12-bit, SVT-AV1 8 and 10-bit; libvpx 10-bit only where it was built for it).
        audio (bool): add an AAC audio track.
        vfr (bool): variable frame rate (irregular timestamps).
        seed (int): content seed.
        preset (str): encoder speed preset (x264/x265 names; AV1 and VP9 use their fastest).
    """

    codec: str = "h264"
    width: int = 320
    height: int = 240
    num_frames: int = 60
    fps: int = 30
    gop: int = 30
    bframes: int = 2
    bitrate: int | None = None
    pix_fmt: str = "yuv420p"
    audio: bool = False
    vfr: bool = False
    seed: int = 0
    preset: str = "veryfast"


def _encoder_params(spec: VideoSpec) -> dict[str, str]:
    if spec.codec == "h264":
        params = f"keyint={spec.gop}:min-keyint={spec.gop}:scenecut=0:bframes={spec.bframes}"
        return {"x264-params": params, "preset": spec.preset}
    if spec.codec == "hevc":
        params = (
            f"keyint={spec.gop}:min-keyint={spec.gop}:scenecut=0:bframes={spec.bframes}"
            ":no-open-gop=1:log-level=error"
        )
        return {"x265-params": params, "preset": spec.preset}
    if spec.codec == "av1":
        # Closed-GOP key frames every `gop` frames (irefresh-type=2), no scene-cut keyframes.
        return {"preset": "12", "svtav1-params": f"keyint={spec.gop}:irefresh-type=2:scd=0"}
    if spec.codec == "vp9":
        # Alt-ref frames on (hidden frames in superframes, as real VP9 files have them).
        return {"deadline": "good", "cpu-used": "8", "auto-alt-ref": "1", "lag-in-frames": "8",
                "g": str(spec.gop), "keyint_min": str(spec.gop)}
    raise ValueError(
        f"synthetic videos support codec 'h264', 'hevc', 'av1' or 'vp9', not {spec.codec!r}"
    )


class _Painter:
    """Draws frame ``i`` of a moving, grainy test pattern (RGB uint8, H×W×3).

    Each channel is ``127 + 100·sin(a·x + b·y + φ + ω·t)``, computed separably
    (``sin(u+v) = sin u·cos v + cos u·sin v``) from one row and one column vector, so a
    1080p frame costs a few milliseconds rather than tens.
    """

    def __init__(self, spec: VideoSpec) -> None:
        rng = np.random.default_rng(spec.seed)
        h, w = spec.height, spec.width
        self.h, self.w = h, w
        self.x = np.arange(w, dtype=np.float32) / w
        self.y = np.arange(h, dtype=np.float32) / h
        self.phase = rng.uniform(0, 2 * np.pi, size=3).astype(np.float32)
        self.freq = rng.uniform(0.5, 2.0, size=3).astype(np.float32)
        self.boxes = rng.uniform(0, 1, size=(3, 4)).astype(np.float32)  # x, y, vx, vy
        self.colors = rng.integers(0, 256, size=(3, 3), dtype=np.uint8)
        # A bank of grain frames, rolled per frame: cheap and still different every frame.
        self.grain = rng.integers(-12, 13, size=(4, h, w, 1), dtype=np.int16)

    def frame(self, i: int) -> np.ndarray:
        t = np.float32(i) / 30.0
        img = np.empty((self.h, self.w, 3), np.float32)
        for c in range(3):
            u = self.x * self.freq[c] * 6.28
            v = self.y * (1 - self.freq[c] / 3) * 6.28 + self.phase[c] + t * (c + 1)
            img[..., c] = np.outer(np.cos(v), np.sin(u)) + np.outer(np.sin(v), np.cos(u))
        img *= 100
        img += 127
        self._draw_boxes(img, i)
        out = img.astype(np.int16)
        out += np.roll(self.grain[i % 4], shift=i * 7, axis=1)
        return np.clip(out, 0, 255).astype(np.uint8)

    def _draw_boxes(self, img: np.ndarray, i: int) -> None:
        bw, bh = max(2, self.w // 6), max(2, self.h // 6)
        for k, (x0, y0, vx, vy) in enumerate(self.boxes):
            x = int(((x0 + i * (vx + 0.2) / 50) % 1.0) * (self.w - bw))
            y = int(((y0 + i * (vy + 0.2) / 70) % 1.0) * (self.h - bh))
            img[y : y + bh, x : x + bw] = self.colors[k]


def _frame_times(spec: VideoSpec) -> list[int]:
    """Presentation times in units of 1/(fps*10) seconds; irregular when ``spec.vfr``."""
    if not spec.vfr:
        return [i * 10 for i in range(spec.num_frames)]
    rng = np.random.default_rng(spec.seed + 1)
    steps = rng.choice([5, 10, 20], size=spec.num_frames)
    return [int(v) for v in np.concatenate([[0], np.cumsum(steps[:-1])])]


def make_video(path: str | os.PathLike, spec: VideoSpec = VideoSpec()) -> Path:
    """Encode a synthetic video to ``path`` (container from the extension) and return the path."""
    import av

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if spec.codec == "av1":
        os.environ.setdefault("SVT_LOG", "1")  # SVT-AV1 prints its whole config otherwise
    painter = _Painter(spec)
    with av.open(str(path), "w") as out:
        stream = out.add_stream(_CODEC_LIBS[spec.codec], rate=spec.fps)
        stream.width, stream.height, stream.pix_fmt = spec.width, spec.height, spec.pix_fmt
        time_base = Fraction(1, spec.fps * 10)
        stream.codec_context.time_base = time_base
        if spec.bitrate:
            stream.bit_rate = spec.bitrate
        stream.options = _encoder_params(spec)
        audio = _add_audio(out) if spec.audio else None
        for i, pts in enumerate(_frame_times(spec)):
            frame = av.VideoFrame.from_ndarray(painter.frame(i), format="rgb24")
            frame = frame.reformat(format=spec.pix_fmt)
            frame.pts, frame.time_base = pts, time_base
            out.mux(stream.encode(frame))
            if audio is not None and i % 3 == 0:
                _mux_audio(out, audio, i, spec.fps)
        out.mux(stream.encode(None))
        if audio is not None:
            out.mux(audio.encode(None))
    return path


def _add_audio(out):
    stream = out.add_stream("aac", rate=44100)
    stream.layout = "mono"
    return stream


def _mux_audio(out, stream, i: int, fps: int) -> None:
    import av

    n = 1024
    t = (np.arange(n) + i * n) / 44100.0
    samples = (0.2 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)[None, :]
    frame = av.AudioFrame.from_ndarray(samples, format="fltp", layout="mono")
    frame.sample_rate = 44100
    out.mux(stream.encode(frame))


def _make_one(args: tuple[str, VideoSpec]) -> str:
    return str(make_video(args[0], args[1]))


def make_dataset(
    directory: str | os.PathLike,
    specs: Sequence[VideoSpec],
    *,
    names: Sequence[str] | None = None,
    num_workers: int | None = None,
    progress: bool = False,
) -> list[Path]:
    """Encode one video per spec into ``directory`` in parallel; return the paths in order.

    Existing files of the same name are kept (generation is deterministic), so a second call is
    free.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    names = names or [f"video_{i:05d}.mp4" for i in range(len(specs))]
    paths = [directory / n for n in names]
    todo = [(str(p), s) for p, s in zip(paths, specs) if not p.exists() or p.stat().st_size == 0]
    workers = num_workers or max(1, min(len(todo), os.cpu_count() or 1))
    if todo:
        _run_jobs(todo, workers, progress)
    return paths


def _run_jobs(todo, workers: int, progress: bool) -> None:
    from tqdm.auto import tqdm

    bar = tqdm(total=len(todo), desc="generating videos", unit="video", disable=not progress)
    if workers == 1:
        for job in todo:
            _make_one(job)
            bar.update()
    else:
        # Never a fork of this process: the caller may already hold CUDA or threads (a fork
        # would copy their locks into the children and hang them). Forks of the fork server.
        with ProcessPoolExecutor(workers, mp_context=worker_context()) as pool:
            for _ in pool.map(_make_one, todo):
                bar.update()
    bar.close()


def demo_specs(num_videos: int = 32, *, seed: int = 0) -> list[VideoSpec]:
    """The demo's dataset: short 480×270 H.264 clips, GOP 30 with B-frames, ~2 Mbit/s."""
    return [
        VideoSpec(
            codec="h264", width=480, height=270, num_frames=150, fps=30, gop=30, bframes=2,
            bitrate=2_000_000, seed=seed + i,
        )
        for i in range(num_videos)
    ]
