"""Does what the probe demuxed agree with what the container states? (issue 17, item 3)

The probe counts the frames it can demux. A file whose sample tables are damaged (200 random
bytes inside an MP4's ``moov`` box) often still demuxes, just fewer frames: 31 of 90, with no
error from FFmpeg. The container's own statements catch that:

- **Stated frame count.** An MP4/MOV's sample table gives an exact count (``nb_frames``). The
  probe finding fewer frames than it states (beyond :data:`COUNT_TOLERANCE`) means the tables
  are damaged or the file was cut: the file is **rejected** (:class:`CorruptVideoError`),
  unless an edit list explains it (the stated duration is the shorter, edited one and the
  demuxed frames span it: a file trimmed without re-encoding), which is **flagged**; finding
  more is **flagged**. Other containers' counts are not exact (AVI's counts ticks of
  its rate), so they are not compared.
- **Edit-list discards.** Frames the sample table holds but an edit list hides (FFmpeg drops
  them) are **flagged** beyond the same tolerance: a damaged edit list hides most of a
  file (61 of 90 frames in one case) while the rest still span the stated duration; a
  file trimmed without re-encoding also hides some, and its warning says so.
- **Stated duration.** The video stream's duration (or, for a file with one stream, the
  container's), compared with the span of the demuxed timestamps. A difference beyond
  :data:`DURATION_TOLERANCE` is **flagged**: stated durations are approximate in many
  containers (rounding, start offsets, an edit list), so they alone never reject a file.

A flag is a warning kept in the index (``VideoRecord.warning``), shown by ``vidloader index``
and ``vidloader info`` and logged by :func:`build_index`; the file is still indexed.
"""

from __future__ import annotations

from ..errors import CorruptVideoError

#: Containers whose ``nb_frames`` is the sample table's exact count (FFmpeg's mov demuxer).
_EXACT_COUNT_FORMATS = ("mov", "mp4")
#: Relative disagreement allowed between the stated and the found frame count; at least
#: :data:`MIN_FRAMES` frames.
COUNT_TOLERANCE = 0.02
#: Relative disagreement allowed between the stated duration and the demuxed span; at least
#: :data:`MIN_FRAMES` frame steps.
DURATION_TOLERANCE = 0.05
MIN_FRAMES = 2


def cross_check(container, stream, path: str, *, found: int, discarded: int,
                span_seconds: float, frame_seconds: float) -> str:
    """Compare the demuxed stream with the container's statements.

    Args:
        container, stream: the open PyAV container and its video stream.
        path: the file, for messages.
        found: frames demuxed that the decoder outputs.
        discarded: frames demuxed that an edit list discards (the sample table counts them).
        span_seconds: first pts to last pts plus the last frame's duration.
        frame_seconds: the typical frame step, for the tolerance's floor.

    Returns:
        A warning for the index (``""`` when both agree).

    Raises:
        CorruptVideoError: an MP4/MOV states more frames than could be demuxed.
    """
    warnings = [
        _count_warning(container, stream, path, found + discarded, span_seconds, frame_seconds),
        _discard_warning(found, discarded),
        _duration_warning(container, stream, span_seconds, frame_seconds),
    ]
    return "; ".join(w for w in warnings if w)


def _count_warning(container, stream, path: str, found: int, span_seconds: float,
                   frame_seconds: float) -> str:
    stated = int(stream.frames or 0)
    names = str(container.format.name).split(",")
    if stated <= 0 or not any(n in _EXACT_COUNT_FORMATS for n in names):
        return ""
    allowed = max(MIN_FRAMES, COUNT_TOLERANCE * stated)
    if found < stated - allowed and _edited(container, stream, stated, span_seconds, frame_seconds):
        return (f"the sample table holds {stated} frames, of which its edit list shows {found} "
                "(a video trimmed without re-encoding)")
    if found < stated - allowed:
        raise CorruptVideoError(
            path,
            f"the container's sample table states {stated} frames but only {found} could be "
            "demuxed: its index (moov box) is damaged or the file was cut short; "
            "re-download or re-encode it",
        )
    if found > stated + allowed:
        return f"the container states {stated} frames but {found} were demuxed"
    return ""


def _edited(container, stream, stated_frames: int, span_seconds: float, frame_seconds: float) -> bool:
    """Whether an edit list explains a shortfall: FFmpeg's mov demuxer drops the samples an
    edit list starts after (before the keyframe preceding the edit) without demuxing them,
    and the stream's stated duration is then the edited one, which the demuxed frames span.
    A damaged sample table instead leaves the stated duration long and the span short."""
    stated_s = _stated_seconds(container, stream)
    if stated_s <= 0 or span_seconds <= 0 or frame_seconds <= 0:
        return False
    allowed = max(MIN_FRAMES * frame_seconds, DURATION_TOLERANCE * stated_s)
    shorter = stated_s < stated_frames * frame_seconds * (1 - COUNT_TOLERANCE)
    return shorter and abs(span_seconds - stated_s) <= allowed


def _discard_warning(found: int, discarded: int) -> str:
    total = found + discarded
    if discarded <= max(MIN_FRAMES, COUNT_TOLERANCE * total):
        return ""
    return (f"its edit list hides {discarded} of the {total} frames the file holds (a damaged "
            "edit list, or a video trimmed without re-encoding)")


def _stated_seconds(container, stream) -> float:
    """The video stream's stated duration, else the container's if the video is all it holds."""
    if stream.duration and stream.time_base:
        return float(stream.duration * stream.time_base)
    if container.duration and len(container.streams) == 1:
        return container.duration / 1e6  # AV_TIME_BASE
    return 0.0


def _duration_warning(container, stream, span_seconds: float, frame_seconds: float) -> str:
    stated = _stated_seconds(container, stream)
    if stated <= 0 or span_seconds <= 0:
        return ""
    allowed = max(MIN_FRAMES * frame_seconds, DURATION_TOLERANCE * stated)
    if abs(span_seconds - stated) <= allowed:
        return ""
    return (f"the container states {stated:.3f} s of video but its frames span "
            f"{span_seconds:.3f} s; frames may be missing or mistimed")
