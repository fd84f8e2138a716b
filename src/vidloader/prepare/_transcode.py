"""Re-encode one video into the loader-friendly form (PyAV): fixed closed GOPs, yuv420p,
optionally no B-frames, optionally smaller, the video stream only.

The output is written under a temporary name in the destination folder and renamed into
place only once complete, so a killed run never leaves a half-written file under the final
name (and a rerun simply redoes that file).
"""

from __future__ import annotations

import dataclasses
import os
from fractions import Fraction
from typing import Literal

from ..errors import CorruptVideoError, MediaError
from ..index import probe_video

Codec = Literal["h264", "hevc"]
_LIBS = {"h264": "libx264", "hevc": "libx265"}

#: Suffix of an output being written; a leftover one (from a killed run) is overwritten.
PARTIAL_SUFFIX = ".partial"


@dataclasses.dataclass(frozen=True)
class PrepareOptions:
    """How to re-encode (see :func:`vidloader.prepare.prepare_dataset` for each field)."""

    gop: int = 30
    bframes: bool = False
    max_size: int | None = None
    codec: Codec = "h264"
    crf: int = 20
    preset: str = "veryfast"


@dataclasses.dataclass(frozen=True)
class FileChange:
    """What preparing one file changed (sizes in bytes, GOP as the mean keyframe interval)."""

    source: str
    output: str
    status: Literal["done", "skipped", "failed"]
    reason: str = ""
    bytes_before: int = 0
    bytes_after: int = 0
    codec_before: str = ""
    gop_before: float = 0.0
    gop_after: float = 0.0
    size_before: tuple[int, int] = (0, 0)
    size_after: tuple[int, int] = (0, 0)
    pix_fmt_before: str = ""
    streams_dropped: int = 0


def output_size(width: int, height: int, max_size: int | None) -> tuple[int, int]:
    """``(width, height)`` scaled so the longer side is at most ``max_size``; even (4:2:0)."""
    scale = 1.0 if not max_size or max(width, height) <= max_size else max_size / max(width, height)
    return max(2, round(width * scale / 2) * 2), max(2, round(height * scale / 2) * 2)


def _encoder_options(opts: PrepareOptions) -> dict[str, str]:
    bframes = 3 if opts.bframes else 0
    common = f"keyint={opts.gop}:min-keyint={opts.gop}:scenecut=0:bframes={bframes}"
    if opts.codec == "hevc":  # x265 opens GOPs unless told not to; x264 closes them by default
        return {"x265-params": f"{common}:no-open-gop=1:log-level=error",
                "preset": opts.preset, "crf": str(opts.crf)}
    return {"x264-params": f"{common}:open-gop=0", "preset": opts.preset, "crf": str(opts.crf)}


def _mean_gop(record) -> float:
    return record.num_frames / max(1, len(record.keyframes))


def transcode(source: str, output: str, opts: PrepareOptions) -> FileChange:
    """Re-encode ``source`` to ``output``; ``output`` appears only when it is complete.

    Raises:
        MediaError: the source cannot be read or the encode fails (naming the source).
    """
    before = probe_video(source)
    width, height = output_size(before.width, before.height, opts.max_size)
    partial = output + PARTIAL_SUFFIX
    os.makedirs(os.path.dirname(output) or ".", exist_ok=True)
    try:
        dropped = _encode(source, partial, opts, (width, height), before.rotation)
        os.replace(partial, output)  # atomic on one file system: never a half file at `output`
    except BaseException as exc:
        if os.path.exists(partial):
            os.remove(partial)
        if isinstance(exc, MediaError) or not isinstance(exc, Exception):
            raise
        raise CorruptVideoError(source, f"re-encoding failed: {exc}") from exc
    after = probe_video(output)
    return FileChange(
        source=source, output=output, status="done", bytes_before=os.path.getsize(source),
        bytes_after=os.path.getsize(output), codec_before=before.codec,
        gop_before=_mean_gop(before), gop_after=_mean_gop(after),
        size_before=(before.width, before.height), size_after=(width, height),
        pix_fmt_before=before.pix_fmt, streams_dropped=dropped,
    )


def _encode(source: str, partial: str, opts: PrepareOptions, size: tuple[int, int],
            rotation: int) -> int:
    """Decode the first video stream and encode it; returns how many other streams were left out."""
    import av

    with av.open(source) as src, av.open(partial, "w", format="mp4") as dst:
        vin = src.streams.video[0]
        vin.thread_type = "AUTO"
        rate = vin.average_rate or vin.guessed_rate or Fraction(30)
        out = dst.add_stream(_LIBS[opts.codec], rate=rate)
        out.width, out.height, out.pix_fmt = size[0], size[1], "yuv420p"
        out.codec_context.time_base = vin.time_base  # keep the source's timestamps (VFR too)
        out.options = _encoder_options(opts)
        if rotation:
            out.set_display_rotation(rotation)
        last = None
        for frame in src.decode(vin):
            pts = frame.pts if frame.pts is not None else (0 if last is None else last + 1)
            if last is not None and pts <= last:
                continue  # a duplicate timestamp cannot be muxed; the index would drop it too
            picture = frame.reformat(width=size[0], height=size[1], format="yuv420p")
            picture.pts, picture.time_base, last = pts, vin.time_base, pts
            dst.mux(out.encode(picture))
        dst.mux(out.encode(None))
        return len(src.streams) - 1
