"""Decoding errors that FFmpeg conceals, made visible.

FFmpeg's H.264/HEVC decoders conceal damage: a slice that fails to parse is logged at
``AV_LOG_ERROR`` ("error while decoding MB …", "Slice overlaps with next …"), patched from
neighbouring pixels, and the frame is returned as if nothing happened (``frame.is_corrupt``
stays false, and ``err_detect=explode`` does not turn these into errors: both measured with
PyAV 18 / libavcodec 62). PyAV counts every ERROR-level message FFmpeg logs
(``av.logging.get_last_error``) once its log callback is installed, so the executor compares
that count around each packet it decodes: a rise means FFmpeg found damage in what it just
decoded, and no frame from then on in that GOP is delivered.

The count is per process, not per decoder: in a process where several threads decode at once,
one file's damage can fail another's GOP (a false alarm, never a missed one). Loader workers
decode on one thread each. With frame threading (``decoder_threads > 1``) FFmpeg may log a
picture's error while a later packet is decoded: it then fails the GOP a packet late, or, at
the GOP's last packet, is seen by the next GOP of the same file. The executor re-installs the
callback at each GOP, so a ``av.logging.set_level(None)`` elsewhere does not switch detection
off for good. What FFmpeg cannot see (garbage that parses, e.g. a damaged
non-reference picture decoded with one slice thread) is still delivered; see the README's
reliability section for the measured rates.
"""

from __future__ import annotations

#: ERROR-level messages that are no damage in the pictures. H.264's reference management logs
#: this when it is told to drop a picture from before the point where decoding began (after a
#: seek into an open-GOP stream: the keyframe's own GOP refers to the GOP before it); the
#: pictures themselves decode exactly (a test compares them with a full decode).
RANDOM_ACCESS_MESSAGES = ("mmco: unref short failure",)


def count_ffmpeg_errors() -> None:
    """Install PyAV's log callback, silently, so FFmpeg's ERROR messages are counted.

    PyAV's default (``set_level(None)``) drops every message uncounted. ``PANIC`` forwards
    only panics to Python's logging, as quiet as before; a level the user set is kept.
    """
    import av.logging

    if av.logging.get_level() is None:
        av.logging.set_level(av.logging.PANIC)


def ffmpeg_errors() -> int:
    """ERROR-level messages FFmpeg has logged in this process so far."""
    import av.logging

    return av.logging.get_last_error()[0]


def last_ffmpeg_error() -> str:
    """The text of the last ERROR-level message FFmpeg logged (``""`` if none)."""
    import av.logging

    last = av.logging.get_last_error()[1]
    return last[2].strip() if last else ""


def last_ffmpeg_error_source() -> str:
    """Which FFmpeg component logged the last ERROR-level message: a decoder's name
    (``"h264"``), a demuxer's (``"matroska,webm"``), ... (``""`` if none)."""
    import av.logging

    last = av.logging.get_last_error()[1]
    return str(last[1] or "") if last else ""


def is_random_access_message(text: str) -> bool:
    """Whether an FFmpeg error message is one of :data:`RANDOM_ACCESS_MESSAGES`."""
    return any(m in text for m in RANDOM_ACCESS_MESSAGES)
