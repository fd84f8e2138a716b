"""Read the display rotation of an MP4/MOV video track from its ``tkhd`` box, without decoding.

PyAV 18 exposes the stream's display matrix only on *decoded frames* (``VideoFrame.rotation``);
FFmpeg 7+ no longer copies it into ``stream.metadata["rotate"]``. Reading the 36-byte matrix of
the track header ourselves keeps probing demux-only. Other containers report 0 here.
"""

from __future__ import annotations

import math
import struct
from typing import BinaryIO

#: Boxes visited before giving up: a garbage file must not make the walk run long.
_MAX_BOXES = 10_000


def _boxes(f: BinaryIO, start: int, end: int):
    """Yield ``(type, payload_start, box_end)`` of the boxes in ``[start, end)``."""
    pos = start
    for _ in range(_MAX_BOXES):
        if pos + 8 > end:
            return
        f.seek(pos)
        size, kind = struct.unpack(">I4s", f.read(8))
        header = 8
        if size == 1:  # 64-bit "largesize" follows the type
            (size,) = struct.unpack(">Q", f.read(8))
            header = 16
        elif size == 0:  # box runs to the end of its parent
            size = end - pos
        if size < header:
            return  # malformed: stop rather than loop forever
        yield kind, pos + header, min(pos + size, end)
        pos += size


def _child(f: BinaryIO, start: int, end: int, kind: bytes) -> tuple[int, int] | None:
    for k, s, e in _boxes(f, start, end):
        if k == kind:
            return s, e
    return None


def _track_rotation(f: BinaryIO, start: int, end: int) -> tuple[bytes, int] | None:
    """``(handler_type, rotation)`` of one ``trak`` box, or ``None`` if it is malformed."""
    tkhd = _child(f, start, end, b"tkhd")
    mdia = _child(f, start, end, b"mdia")
    hdlr = _child(f, *mdia, b"hdlr") if mdia else None
    if tkhd is None or hdlr is None:
        return None
    f.seek(hdlr[0] + 8)  # version/flags (4) + pre_defined (4), then the handler type
    handler = f.read(4)
    f.seek(tkhd[0])
    version = f.read(1)[0]
    # version/flags, then times/track id/duration (20 bytes in v0, 32 in v1), then
    # reserved (8), layer, alternate group, volume, reserved (2 each): 36 or 48 bytes.
    f.seek(tkhd[0] + 4 + (32 if version == 1 else 20) + 16)
    a, b = struct.unpack(">2i", f.read(8))
    # Same formula as FFmpeg's av_display_rotation_get(): counter-clockwise degrees.
    degrees = -math.degrees(math.atan2(b, a)) if (a or b) else 0.0
    return handler, int(round(degrees)) % 360


def mp4_rotation(path: str, stream_index: int) -> int:
    """Rotation in degrees (0, 90, 180, 270) of the ``stream_index``-th track of an MP4/MOV.

    FFmpeg's mov demuxer numbers streams in ``trak`` order, so the k-th track is stream k.
    Returns 0 when the file has no readable ``moov`` box. Flips in the matrix are not reported.
    """
    with open(path, "rb") as f:
        f.seek(0, 2)
        moov = _child(f, 0, f.tell(), b"moov")
        if moov is None:
            return 0
        tracks = [_track_rotation(f, s, e) for k, s, e in _boxes(f, *moov) if k == b"trak"]
    if 0 <= stream_index < len(tracks) and tracks[stream_index] is not None:
        return tracks[stream_index][1]
    video = [t for t in tracks if t is not None and t[0] == b"vide"]
    return video[0][1] if video else 0
