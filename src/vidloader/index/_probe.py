"""Probe one video by demuxing it (no pixel decode) into a :class:`VideoRecord`.

Frame ``i`` is the ``i``-th frame in ascending pts, which is the order in which a full decode
of the file outputs its frames. The count is exact because it is the number of packets of the
video stream that the decoder would turn into frames (empty/flush packets and packets that an
edit list marks "discard" are skipped, as FFmpeg's decoder drops their output).

Open-GOP streams whose first displayed picture is not a keyframe (leading pictures before the
first random-access point) are rejected with :class:`CorruptVideoError`: a decoder drops or
mangles those pictures, so no backend could deliver them as frames ``0..k-1``.

The count is then cross-checked against the container's stated frame count and duration
(:mod:`._crosscheck`): an MP4 whose damaged sample table lets fewer frames be demuxed than
it states is rejected; other disagreements are kept as the record's ``warning``.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import struct
from fractions import Fraction

import numpy as np

from .._utils._av import open_input
from ..errors import CorruptVideoError, VideoNotFoundError
from ._codecs import codec_name
from ._crosscheck import cross_check
from ._record import VideoRecord
from ._rotation import mp4_rotation
from ._streams import StreamChoice, check_stream_choice, select_video_stream

logger = logging.getLogger(__name__)

# FFmpeg's AVColorSpace and AVColorRange values, named as ``ffprobe`` names them.
_COLOR_SPACES = {
    0: "gbr", 1: "bt709", 2: "unknown", 3: "reserved", 4: "fcc", 5: "bt470bg",
    6: "smpte170m", 7: "smpte240m", 8: "ycgco", 9: "bt2020nc", 10: "bt2020c",
    11: "smpte2085", 12: "chroma-derived-nc", 13: "chroma-derived-c", 14: "ictcp",
}
_COLOR_RANGES = {0: "unknown", 1: "tv", 2: "pc"}


def probe_video(path: str | os.PathLike, *, stream: StreamChoice = "best") -> VideoRecord:
    """Demux a video file and describe one of its video streams.

    Args:
        path: the video file.
        stream: which video stream: ``"best"`` (as the ``ffmpeg`` command line picks: the
            largest, a *default* one preferred, never cover art), ``"first"``, or a stream
            index in the container. Recorded as :attr:`VideoRecord.stream_index`.

    Returns:
        A :class:`VideoRecord` with the exact frame count, the pts of every frame in display
        order and the display indices of the keyframes.

    Raises:
        VideoNotFoundError: ``path`` does not exist.
        CorruptVideoError: the file is empty, truncated, corrupt, has no video stream (or
            ``stream`` is not one) or no frames, has duplicate timestamps, or does not start
            with a keyframe.
        ConfigError: ``stream`` is not ``"best"``, ``"first"`` or an int >= 0.
    """
    import av  # core dependency, imported lazily so `import vidloader` stays cheap

    choice = check_stream_choice(stream)
    path = os.path.abspath(os.fspath(path))
    # Stat before reading: a file rewritten while we probe then looks changed at decode time.
    size, mtime_ns = _check_file(path)
    try:
        container = open_input(path)
    except av.FFmpegError as exc:
        reason = f"FFmpeg cannot open it ({exc.strerror or exc}); is it a video file?"
        raise CorruptVideoError(path, reason) from exc
    try:
        record = _probe_container(container, path, size, choice)
    except av.FFmpegError as exc:
        reason = f"demuxing failed ({exc.strerror or exc}); the file is corrupt or truncated"
        raise CorruptVideoError(path, reason) from exc
    finally:
        container.close()
    return dataclasses.replace(record, mtime_ns=mtime_ns)


def _check_file(path: str) -> tuple[int, int]:
    """``(size, mtime_ns)`` of a regular, non-empty file."""
    if not os.path.exists(path):
        raise VideoNotFoundError(path, "no such file; check the path (or the index is stale)")
    if not os.path.isfile(path):
        raise CorruptVideoError(path, "not a regular file (a directory?); pass video files")
    st = os.stat(path)
    if st.st_size == 0:
        raise CorruptVideoError(path, "the file is empty (0 bytes); re-create or remove it")
    return st.st_size, st.st_mtime_ns


def _probe_container(container, path: str, size: int, choice: StreamChoice) -> VideoRecord:
    stream = select_video_stream(container, choice, path)
    if stream.time_base is None:
        raise CorruptVideoError(path, "the video stream has no time base")
    if stream.codec_context is None:  # e.g. a damaged codec tag FFmpeg has no decoder for
        raise CorruptVideoError(
            path, "FFmpeg has no decoder for its video stream: the header is damaged or the "
            "codec unsupported; re-encode the file",
        )
    _check_not_truncated(stream, path, size)
    pts, is_key, last_duration, discarded = _demux_timestamps(container, stream, path)
    pts, keyframes = _display_order(pts, is_key, path)
    time_base = Fraction(stream.time_base)
    step = _frame_step(pts, last_duration)
    span = int(pts[-1] - pts[0]) + step
    warning = cross_check(container, stream, path, found=len(pts), discarded=discarded,
                          span_seconds=float(span * time_base), frame_seconds=float(step * time_base))
    cc = stream.codec_context
    pix_fmt = cc.pix_fmt or "unknown"
    return VideoRecord(
        path=path,
        codec=_codec_name(cc),
        profile=_profile(cc),
        width=int(cc.width),
        height=int(cc.height),
        pix_fmt=pix_fmt,
        bit_depth=_bit_depth(pix_fmt),
        rotation=_rotation(container, stream, path),
        fps=_fps(len(pts), span, time_base, stream),
        time_base=time_base,
        num_frames=len(pts),
        keyframes=keyframes,
        pts=pts,
        color_space=_COLOR_SPACES.get(int(cc.colorspace or 2), "unknown"),
        color_range=_COLOR_RANGES.get(int(cc.color_range or 0), "unknown"),
        stream_index=int(stream.index),
        size_bytes=size,
        warning=warning,
    )


def _codec_name(cc) -> str:
    """The codec's name (``"av1"``), not that of the decoder FFmpeg picked (``"libdav1d"``)."""
    codec = getattr(cc, "codec", None)
    name = getattr(codec, "canonical_name", None) or cc.name
    return codec_name(str(name))


def _profile(cc) -> str:
    """The profile's name as FFmpeg gives it (``"High 10"``, ``"Main 10"``), ``""`` if none."""
    try:
        profile = cc.profile
    except Exception:  # a PyAV without profile names, or an unknown profile id
        return ""
    return profile if isinstance(profile, str) else ""


def _check_not_truncated(stream, path: str, size: int) -> None:
    """Reject a file whose sample index points past its end (a cut-off faststart MP4).

    Demuxing such a file just stops early without an error, which would index fewer frames
    than the file claims; the last index entry tells us without reading the payload.
    """
    entries = stream.index_entries
    n = len(entries)
    if n == 0:
        return
    last = entries[n - 1]
    end = int(last.pos) + int(last.size)
    if last.pos >= 0 and end > size:
        raise CorruptVideoError(
            path,
            f"truncated: the container index expects {end} bytes but the file has {size}; "
            "re-download or re-encode it",
        )


def _demux_timestamps(container, stream, path: str) -> tuple[np.ndarray, np.ndarray, int, int]:
    """pts (dts where pts is missing) and keyframe flags of every frame packet in decode
    order, the last frame's duration, and how many packets an edit list discards."""
    pts: list[int] = []
    keys: list[bool] = []
    durations: dict[int, int] = {}
    discarded = 0
    for packet in container.demux(stream):
        if packet.size == 0:
            continue  # flush packets carry no frame
        if getattr(packet, "is_discard", False):
            discarded += 1  # the decoder drops its output, but the sample table counts it
            continue
        t = packet.pts if packet.pts is not None else packet.dts
        if t is None:
            raise CorruptVideoError(path, f"video packet {len(pts)} has neither pts nor dts")
        pts.append(t)
        keys.append(bool(packet.is_keyframe))
        durations[t] = packet.duration or 0
    if not pts:
        raise CorruptVideoError(path, "the video stream has no frames")
    last = max(pts)
    return np.asarray(pts, np.int64), np.asarray(keys, bool), durations[last], discarded


def _display_order(pts: np.ndarray, is_key: np.ndarray, path: str) -> tuple[np.ndarray, np.ndarray]:
    """Sort pts into display order; keyframes become display indices."""
    order = np.argsort(pts, kind="stable")
    sorted_pts = pts[order]
    dup = np.flatnonzero(np.diff(sorted_pts) == 0)
    if dup.size:
        raise CorruptVideoError(
            path, f"two frames share pts {int(sorted_pts[dup[0]])}; frame order is ambiguous"
        )
    keyframes = np.flatnonzero(is_key[order]).astype(np.int64)
    if keyframes.size == 0 or keyframes[0] != 0:
        first = "none" if keyframes.size == 0 else f"display frame {int(keyframes[0])}"
        raise CorruptVideoError(
            path,
            f"the first displayed frame is not a keyframe (first keyframe: {first}); open-GOP "
            "leading pictures cannot be decoded exactly. Re-encode with closed GOPs",
        )
    return sorted_pts, keyframes


def _bit_depth(pix_fmt: str) -> int:
    """Bits per luma sample: from FFmpeg's format descriptor, else from the name."""
    import av

    try:
        return int(av.VideoFormat(pix_fmt).components[0].bits)
    except Exception:  # unknown/None pix_fmt: the name is the best evidence left
        m = re.search(r"p(\d+)(le|be)?$", pix_fmt)
        return int(m.group(1)) if m else 8


def _rotation(container, stream, path: str) -> int:
    """Display-matrix rotation in degrees, read without decoding (see ``_rotation.py``)."""
    if "mp4" in container.format.name or "mov" in container.format.name:
        try:
            return mp4_rotation(path, stream.index)
        except (OSError, struct.error, IndexError, TypeError):
            logger.debug("%s: could not read the tkhd matrix; assuming no rotation", path)
    try:
        return int(round(float(stream.metadata.get("rotate", 0)))) % 360
    except ValueError:
        return 0


def _frame_step(pts: np.ndarray, last_duration: int) -> int:
    """The last frame's display time (time-base units); the typical step when unknown."""
    if last_duration <= 0 and len(pts) > 1:
        return int(np.median(np.diff(pts)))
    return max(last_duration, 0)


def _fps(n: int, span: int, time_base: Fraction, stream) -> float:
    """frames / duration, where the duration ``span`` includes the last frame's display time."""
    if span > 0:
        return float(n / (span * time_base))
    rate = stream.average_rate or stream.guessed_rate
    return float(rate) if rate else 0.0
