"""Which video stream of a file to index, and a one-line description of every stream.

``stream="best"`` follows the ``ffmpeg`` command line's rule for video: never cover art
(attached pictures), the highest score ``width × height + 5,000,000`` if the stream is marked
*default*, and the lowest index among equal scores. ``"first"`` is the first video stream, ``int`` a stream's index in the
container (``ffprobe``'s and torchcodec's ``stream_index``). The choice is recorded per
video as :attr:`VideoRecord.stream_index`, which every backend decodes.
"""

from __future__ import annotations

from typing import Literal

from .._utils._args import check_int
from ..errors import ConfigError, CorruptVideoError

StreamChoice = Literal["best", "first"] | int

# FFmpeg's AV_DISPOSITION_* bits (PyAV's ``Disposition`` flags have the same values).
_DEFAULT, _ATTACHED_PIC = 0x1, 0x400


def check_stream_choice(stream: object) -> StreamChoice:
    """``stream`` if it is ``"best"``, ``"first"`` or a stream index >= 0."""
    if isinstance(stream, str):
        if stream not in ("best", "first"):
            raise ConfigError(f"stream must be 'best', 'first' or a stream index (int >= 0), "
                              f"got {stream!r}")
        return stream
    return check_int("stream", stream, minimum=0, fix="'best', 'first' or a stream index")


def _disposition(stream) -> int:
    try:
        return int(getattr(stream, "disposition", 0) or 0)
    except (TypeError, ValueError):
        return 0


def _score(stream) -> int:
    """The ``ffmpeg`` command line's score of a video stream (fftools' ``map_auto_video``)."""
    cc = stream.codec_context  # None where FFmpeg has no decoder (e.g. a damaged codec tag)
    default = 5_000_000 if _disposition(stream) & _DEFAULT else 0
    return (int(cc.width or 0) * int(cc.height or 0) if cc is not None else 0) + default


def select_video_stream(container, choice: StreamChoice, path: str):
    """The video stream ``choice`` names in ``container`` (see the module's rule).

    Raises:
        CorruptVideoError: the file has no video stream, or stream ``choice`` is not one.
    """
    videos = list(container.streams.video)
    if not videos:
        raise CorruptVideoError(path, "the file has no video stream")
    if isinstance(choice, int):
        for s in videos:
            if s.index == choice:
                return s
        have = ", ".join(str(s.index) for s in videos)
        raise CorruptVideoError(path, f"stream {choice} is not a video stream of this file (its "
                                      f"video streams: {have}); pass stream='best' or one of them")
    if choice == "first":
        return videos[0]
    pictures = [s for s in videos if not _disposition(s) & _ATTACHED_PIC] or videos
    return max(pictures, key=lambda s: (_score(s), -s.index))


def describe_streams(container) -> list[str]:
    """One line per stream of ``container``: index, type, codec, and the video's size and
    marks (``default``, ``cover art``)."""
    lines = []
    for s in container.streams:
        cc = s.codec_context
        text = f"#{s.index} {s.type} {getattr(cc, 'name', '?')}"
        if s.type == "video" and cc is not None:
            text += f" {cc.width}x{cc.height}"
            marks = [name for bit, name in ((_DEFAULT, "default"), (_ATTACHED_PIC, "cover art"))
                     if _disposition(s) & bit]
            text += f" ({', '.join(marks)})" if marks else ""
        lines.append(text)
    return lines
