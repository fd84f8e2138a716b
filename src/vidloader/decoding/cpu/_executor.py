"""The CPU executor: FFmpeg decoding through PyAV, GOP by GOP, forward only.

For each GOP of a task the decoder either keeps going (it is already inside the GOP, before
the first wanted frame) or seeks to the GOP's keyframe; it then decodes forward, skipping
non-reference frames that no request needs, and stops as soon as the GOP's last wanted frame
is out. Decoded frames are matched to display indices by pts (``record.pts``), never by
counting, so B-frame reordering, VFR and edit lists cannot shift the numbering.
"""

from __future__ import annotations

import collections
import dataclasses
import heapq
from collections.abc import Iterator
from typing import Any, Literal

import numpy as np

from ... import constants
from ..._utils._av import open_input
from ..._utils._nvtx import Ranges
from ...errors import ConfigError, CorruptVideoError, UnsupportedCodecError, VideoNotFoundError
from ...index import VideoRecord
from .._base import DecodeTask, Executor, FrameSink, GopRequest
from ._errors import (
    count_ffmpeg_errors,
    ffmpeg_errors,
    is_random_access_message,
    last_ffmpeg_error,
    last_ffmpeg_error_source,
)
from ._frame import CpuFrame

_THREAD_TYPES = ("AUTO", "FRAME", "SLICE")

DEFAULT_MAX_OPEN_FILES = constants.DEFAULT_MAX_OPEN_FILES

#: Readers one file may have open at once for a loader on a plan of streams
#: (``readers_per_file``): two streams walking one video at two places (the separation
#: example's stream order, whose runs can share a clip) each keep theirs, instead of one
#: reader seeking back and forth between them. Elsewhere one reader per file, as before: a
#: second one buys nothing on random access, and on the 2-core machine closing a second
#: frame-threaded decoder of one file once hung in FFmpeg's ``avcodec_free_context``.
STREAM_READERS_PER_FILE = 2


def _continues(video: _OpenVideo, gop: GopRequest) -> bool:
    """Whether ``video``'s decoder goes on forward into ``gop`` without a seek."""
    return video.packets is not None and gop.keyframe - 1 <= video.last_index < int(gop.frames[0])


def _past(video: _OpenVideo, gop: GopRequest) -> bool:
    """Whether ``video``'s decoder already stands at or past ``gop``'s first wanted frame."""
    return video.last_index >= int(gop.frames[0])


@dataclasses.dataclass(eq=False)
class _OpenVideo:
    """One open file and where its decoder stands."""

    container: Any
    stream: Any
    packets: Iterator[Any] | None  # live demuxer; None once drained (a seek restarts it)
    last_index: int = -1  # display index of the newest frame taken from the decoder
    untouched: bool = True  # no packet decoded since open: position is exactly frame 0
    skip_mode: str = "DEFAULT"
    path: str = ""
    errors_at: int = 0  # FFmpeg's error count when the current GOP was entered
    key_pts: int = -(2**63)  # pts of the current GOP's keyframe (leading pictures come before)
    pending: list[int] = dataclasses.field(default_factory=list)  # heap: pts sent as NONREF
    leftover: collections.deque = dataclasses.field(default_factory=collections.deque)

    def close(self) -> None:
        if self.packets is not None:
            self.packets.close()
        self.container.close()


class CpuExecutor(Executor):
    """Decodes tasks on the CPU with FFmpeg (PyAV); frames convert/resize through swscale.

    One executor serves one thread. It keeps up to ``max_open_files`` files open (LRU), so a
    task on the same video as a recent one neither reopens nor, when it lies ahead of the
    decoder in the same GOP, seeks.

    Args:
        thread_count: FFmpeg decoder threads per file (0 = FFmpeg decides); also the swscale
            thread count for conversions.
        thread_type: ``"AUTO"``, ``"FRAME"`` or ``"SLICE"`` threading.
        skip_nonref: decode non-reference frames only when a request needs them
            (``skip_frame = NONREF`` toggled per packet). Exact with every thread type:
            FFmpeg's frame threads copy ``skip_frame`` from the user context at each packet.
        interpolation: swscale algorithm for resizing in ``to_rgb(size)`` (PyAV
            ``Interpolation`` name, e.g. ``"BILINEAR"``, ``"AREA"``).
        max_open_files: files kept open at once.
        readers_per_file: readers of one file kept open at once (each a demuxer and a
            decoder at its own place): 2 for a plan of streams, whose rows may walk one video
            at two places; 1 otherwise.
        detect_errors: fail a GOP in which FFmpeg logs a decoding error, which it otherwise
            conceals and returns as a normal frame (see :mod:`._errors`): frames decoded
            before the error are delivered, the rest raise :class:`CorruptVideoError`.
        nvtx: emit an NVTX range ``vidloader.decode <path>`` around each task (demuxing and
            decoding interleave inside FFmpeg, so one range covers both; the sink's own
            ranges nest inside). Default False: no cost.
    """

    name = "cpu"

    def __init__(
        self,
        *,
        thread_count: int = constants.DEFAULT_DECODER_THREADS,
        thread_type: Literal["AUTO", "FRAME", "SLICE"] = "AUTO",
        skip_nonref: bool = True,
        interpolation: str = constants.DEFAULT_INTERPOLATION,
        max_open_files: int = DEFAULT_MAX_OPEN_FILES,
        readers_per_file: int = 1,
        detect_errors: bool = True,
        nvtx: bool = False,
    ) -> None:
        super().__init__()
        self.ranges = Ranges(nvtx)
        _check_options(thread_count, thread_type, interpolation, max_open_files)
        self.thread_count = int(thread_count)
        self.thread_type = thread_type
        self.skip_nonref = bool(skip_nonref)
        self.interpolation = interpolation
        self.max_open_files = int(max_open_files)
        if isinstance(readers_per_file, bool) or not isinstance(readers_per_file, int) or readers_per_file < 1:
            raise ConfigError(f"readers_per_file must be an int >= 1, got {readers_per_file!r}")
        self.readers_per_file = readers_per_file
        self.detect_errors = bool(detect_errors)
        if self.detect_errors:
            count_ffmpeg_errors()
        #: Open readers, least recently used first, by (path, reader number): a file read
        #: at two places at once (two streams of one video) gets a reader for each.
        self._videos: collections.OrderedDict[tuple[str, int], _OpenVideo] = collections.OrderedDict()
        self._reformatter: Any = None

    def decode(self, task: DecodeTask, sink: FrameSink) -> None:
        """Decode ``task`` and call ``sink(i, frame)`` once per wanted frame, ascending.

        Raises:
            VideoNotFoundError, CorruptVideoError, UnsupportedCodecError: naming the file.
        """
        self.stats.tasks += 1
        if not task.gops:
            return
        with self.ranges("vidloader.decode", task.record.path):
            key, video = self._acquire(task)
            frames = self._wanted_frames(video, task)
            try:
                for i, frame in frames:
                    sink(i, CpuFrame(frame, self._swscale(), self.interpolation, self.thread_count))
                    self.stats.delivered += 1
            except BaseException:
                # An error (ours or the sink's) leaves the decoder somewhere unknown: reopen next time.
                frames.close()
                self._forget(key)
                raise

    def close(self) -> None:
        while self._videos:
            self._videos.popitem(last=False)[1].close()

    # -- files ----------------------------------------------------------------------------

    def _acquire(self, task: DecodeTask) -> tuple[tuple[str, int], _OpenVideo]:
        """A reader of the task's file: one whose decoder continues forward into the task's
        first GOP if there is one; else a new one if every reader of the file stands past
        the task (another stream of the same video, which they serve), up to
        :attr:`readers_per_file`; else the file's least recently used reader (it seeks)."""
        record, first = task.record, task.gops[0]
        mine = [k for k in self._videos if k[0] == record.path]
        key = next((k for k in reversed(mine) if _continues(self._videos[k], first)), None)
        if key is None and mine and (len(mine) >= self.readers_per_file
                                     or not all(_past(self._videos[k], first) for k in mine)):
            key = mine[0]
        video = self._videos.pop(key) if key is not None else None
        if video is not None:
            try:
                # Rewritten in place while open, the file would be read through the open
                # handle under the old frame table: one stat (~2 µs) per use, not per open.
                record.check_unchanged()
            except BaseException:
                video.close()
                raise
        if video is None:
            while len(self._videos) >= self.max_open_files:
                self._videos.popitem(last=False)[1].close()
            taken = {k[1] for k in mine}
            key = (record.path, next(n for n in range(len(taken) + 1) if n not in taken))
            video = _open_video(record, self.thread_count, self.thread_type)
        self._videos[key] = video  # most recently used last
        return key, video

    def _forget(self, key: tuple[str, int]) -> None:
        video = self._videos.pop(key, None)
        if video is not None:
            video.close()

    def _swscale(self) -> Any:
        if self._reformatter is None:
            from av.video.reformatter import VideoReformatter

            # One swscale context per executor, reused across frames of the same geometry.
            self._reformatter = VideoReformatter()
        return self._reformatter

    # -- decoding -------------------------------------------------------------------------

    def _wanted_frames(self, video: _OpenVideo, task: DecodeTask) -> Iterator[tuple[int, Any]]:
        """``(display index, av.VideoFrame)`` of every wanted frame, GOP by GOP."""
        import av

        record = task.record
        wanted = set(record.pts[task.frames].tolist()) if self.skip_nonref else None
        try:
            for gop in task.gops:
                yield from self._gop_frames(video, record, gop, wanted)
        except av.FFmpegError as exc:
            raise media_error(record.path, exc) from exc

    def _gop_frames(
        self, video: _OpenVideo, record: VideoRecord, gop: GopRequest, wanted: set[int] | None
    ) -> Iterator[tuple[int, Any]]:
        exact = self._enter(video, record, gop)
        if self.detect_errors:
            count_ffmpeg_errors()  # again: a user or a library may have set PyAV's level to None
        video.errors_at = ffmpeg_errors()
        video.key_pts = int(record.pts[gop.keyframe])
        missing = yield from self._scan(video, record, gop.frames, wanted)
        if len(missing) and not exact:
            # The decoder came from an earlier GOP or task and had already dropped a frame
            # this GOP needs (returned it, or skipped it as non-reference): decode it again.
            self._seek(video, record, gop.keyframe)
            missing = yield from self._scan(video, record, missing, wanted)
        if len(missing):
            shown = ", ".join(str(int(i)) for i in missing[:10])
            raise CorruptVideoError(
                record.path,
                f"frames {shown}{' …' if len(missing) > 10 else ''} could not be decoded (the "
                f"stream ended or skipped past them; it has {record.num_frames} frames in the "
                "index): the file is truncated or corrupt, or the index is stale",
            )

    def _enter(self, video: _OpenVideo, record: VideoRecord, gop: GopRequest) -> bool:
        """Position the decoder for ``gop``; return whether the position is exact."""
        inside = gop.keyframe - 1 <= video.last_index < int(gop.frames[0])
        if video.packets is not None and inside:
            return video.untouched  # keep decoding forward: no seek
        self._seek(video, record, gop.keyframe)
        return True

    def _seek(self, video: _OpenVideo, record: VideoRecord, keyframe: int) -> None:
        if video.packets is not None:
            video.packets.close()
        video.packets = self._demux_from(video, record, int(record.pts[keyframe]))
        video.pending.clear()
        video.leftover.clear()
        video.last_index = keyframe - 1
        video.untouched = False

    def _demux_from(self, video: _OpenVideo, record: VideoRecord, target: int) -> Iterator[Any]:
        """Packets from the keyframe with pts ``target`` on, whatever the demuxer's seek did.

        The MP4 demuxer searches its DTS index for ``pts - max_ctts_shift``, so with VFR it
        often lands one GOP early: those packets are dropped unread by the decoder (GOPs are
        closed, so the keyframe decodes alone). If it lands late, start from the beginning.
        """
        packets = self._seek_container(video, target)
        first = next(packets, None)
        if first is not None and first.pts is not None and first.pts > target:
            packets.close()
            packets = self._seek_container(video, int(record.pts[0]))
            first = next(packets, None)
        while first is not None and first.size and first.pts is not None and first.pts < target:
            first = next(packets, None)
        if first is not None:
            yield first
            yield from packets

    def _seek_container(self, video: _OpenVideo, target: int) -> Iterator[Any]:
        # PyAV's seek also flushes the decoder (avcodec_flush_buffers), EOF state included.
        video.container.seek(target, stream=video.stream, backward=True, any_frame=False)
        self.stats.seeks += 1
        return video.container.demux(video.stream)

    def _scan(
        self, video: _OpenVideo, record: VideoRecord, frames: np.ndarray, wanted: set[int] | None
    ) -> Iterator[tuple[int, Any]]:
        """Decode forward, yielding wanted ``frames``; return those not reached (empty = all).

        Stops at the last wanted frame; frames the same packet also produced wait in
        ``video.leftover`` for the next GOP or task.
        """
        k, n = 0, len(frames)
        for frame in self._decoded(video, wanted):
            i = self._frame_index(video, record, frame)
            if i < 0 or i < frames[k]:
                continue  # passing through
            if i > frames[k]:
                return frames[k:]  # the decoder is past a wanted frame: it was lost
            _check_size(record, frame, i)
            yield i, frame
            k += 1
            if k == n:
                return frames[:0]
        return frames[k:]

    def _decoded(self, video: _OpenVideo, wanted: set[int] | None) -> Iterator[Any]:
        """Decoded frames in output order, leftovers first; feeds packets as needed.

        Frames not consumed when the caller stops stay in ``video.leftover``.
        """
        leftover = video.leftover
        while leftover:
            yield leftover.popleft()
        decode = video.stream.codec_context.decode
        for packet in video.packets or ():
            if wanted is not None:
                self._set_skip(video, packet, wanted)
            self.stats.packets += bool(packet.size)
            video.untouched = False
            out = decode(packet)
            # Only after a packet with data: at the flush packet a demuxer's end-of-file
            # complaint ("File ended prematurely") is better told as the missing frames.
            if not (self.detect_errors and packet.size):
                pass
            elif packet.pts is not None and packet.pts < video.key_pts:
                # A leading picture of an open GOP, decoded after a seek to its keyframe: its
                # references lie in the GOP before, so FFmpeg logs missing references
                # ("mmco: unref short failure"). It is never delivered from this GOP.
                video.errors_at = ffmpeg_errors()
            elif self._damage_logged(video):
                raise CorruptVideoError(
                    video.path,
                    f"FFmpeg reported damage while decoding the packet at pts {packet.pts} "
                    f"({last_ffmpeg_error()!r}) and would conceal it; the frames from there to "
                    "the next keyframe are not delivered. Re-encode or replace the file",
                )
            self.stats.decoded += len(out)
            leftover.extend(out)
            while leftover:
                yield leftover.popleft()
        video.packets = None  # demuxer exhausted, decoder drained

    @staticmethod
    def _damage_logged(video: _OpenVideo) -> bool:
        """Whether FFmpeg logged an error since the GOP began, from the decoder. The
        demuxer's complaints are not damage in the pictures (Matroska logs "keyframes not
        correctly marked" on seeks into valid files): they move the baseline instead. Only
        the last message's source is known; a decoder error followed by a demuxer one in the
        same packet is missed (never a false alarm)."""
        count = ffmpeg_errors()
        if count == video.errors_at:
            return False
        if (last_ffmpeg_error_source() != video.stream.codec_context.name
                or is_random_access_message(last_ffmpeg_error())):
            video.errors_at = count
            return False
        return True

    def _frame_index(self, video: _OpenVideo, record: VideoRecord, frame: Any) -> int:
        """Display index of a decoded frame by its pts (-1 if unknown); tracks the position."""
        t = frame.pts if frame.pts is not None else frame.dts
        if t is None:
            return -1
        pending = video.pending
        while pending and pending[0] <= t:
            # Frames come out in pts order: a NONREF-time packet whose pts is already behind
            # was skipped by the decoder (equal pts: it was a reference frame, decoded).
            self.stats.skipped += heapq.heappop(pending) < t
        i = int(np.searchsorted(record.pts, t))
        if i == record.num_frames or record.pts[i] != t:
            return -1
        video.last_index = max(video.last_index, i)
        return i

    @staticmethod
    def _set_skip(video: _OpenVideo, packet: Any, wanted: set[int]) -> None:
        """Let the decoder drop this packet's frame if it is non-reference and not wanted."""
        t = packet.pts if packet.pts is not None else packet.dts
        mode = "NONREF" if t is not None and packet.size and t not in wanted else "DEFAULT"
        if mode != video.skip_mode:
            video.stream.codec_context.skip_frame = mode
            video.skip_mode = mode
        if mode == "NONREF":
            heapq.heappush(video.pending, t)


def _check_size(record: VideoRecord, frame: Any, i: int) -> None:
    """A picture of another size than the index's is another video (a file replaced with the
    same byte size and modification time) or a stream that changes size; either way the
    crop windows planned from the index would not fit it."""
    if frame.width != record.width or frame.height != record.height:
        raise CorruptVideoError(
            record.path, f"frame {i} decodes to {frame.width}x{frame.height}, but the index "
            f"records {record.width}x{record.height}: the file was replaced after indexing (same "
            "byte size and modification time) or its picture size changes mid-stream. Re-index "
            "it (or re-encode it to one picture size)",
        )


def _check_options(thread_count: int, thread_type: str, interpolation: str, max_open: int) -> None:
    from av.video.reformatter import Interpolation

    if int(thread_count) < 0:
        raise ConfigError(f"thread_count must be >= 0 (0 = FFmpeg decides), got {thread_count}")
    if thread_type not in _THREAD_TYPES:
        raise ConfigError(f"thread_type must be one of {_THREAD_TYPES}, got {thread_type!r}")
    if interpolation not in Interpolation.__members__:
        raise ConfigError(
            f"interpolation must be one of {sorted(Interpolation.__members__)}, "
            f"got {interpolation!r}"
        )
    if int(max_open) < 1:
        raise ConfigError(f"max_open_files must be >= 1, got {max_open}")


def _open_video(record: VideoRecord, thread_count: int, thread_type: str) -> _OpenVideo:
    import av

    path = record.path
    record.check_unchanged()  # a replaced file must not be decoded under the old frame table
    try:
        container = open_input(path)
    except av.FFmpegError as exc:
        raise media_error(path, exc) from exc
    try:
        stream = _video_stream(container, record)
        cc = stream.codec_context
        cc.thread_count = thread_count
        cc.thread_type = thread_type
        cc.open(strict=False)  # here, so that a missing/unusable decoder is reported as such
    except av.FFmpegError as exc:
        container.close()
        reason = exc.strerror or exc
        raise UnsupportedCodecError(
            path, f"cannot open the {record.codec} decoder ({reason})"
        ) from exc
    except BaseException:
        container.close()
        raise
    return _OpenVideo(container, stream, container.demux(stream), path=path)


def _video_stream(container: Any, record: VideoRecord) -> Any:
    streams = container.streams
    if record.stream_index >= len(streams) or streams[record.stream_index].type != "video":
        raise CorruptVideoError(
            record.path,
            f"stream {record.stream_index} is not a video stream of this file; re-index it",
        )
    stream = streams[record.stream_index]
    if stream.codec_context is None:
        raise UnsupportedCodecError(
            record.path, f"this FFmpeg build has no decoder for codec {record.codec!r}"
        )
    return stream


def media_error(path: str, exc: BaseException) -> Exception:
    """The typed error for a PyAV/OS failure on ``path`` (raise it ``from exc``)."""
    import av

    reason = getattr(exc, "strerror", None) or str(exc)
    if isinstance(exc, FileNotFoundError):
        return VideoNotFoundError(path, "no such file; check the path (or the index is stale)")
    if isinstance(exc, IsADirectoryError | NotADirectoryError | PermissionError):
        return CorruptVideoError(path, f"cannot read it as a video file ({reason})")
    if isinstance(exc, av.error.DecoderNotFoundError | av.error.PatchWelcomeError):
        return UnsupportedCodecError(path, f"FFmpeg cannot decode this stream ({reason})")
    return CorruptVideoError(
        path, f"FFmpeg failed on it ({reason}); the file is corrupt or truncated"
    )
