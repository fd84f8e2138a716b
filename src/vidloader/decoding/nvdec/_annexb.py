"""Separation-mode demux: the packets an NVDEC decoder needs, as Annex B, without any GPU.

This module runs in CPU worker processes, so it imports neither ``torch.cuda`` nor
PyNvVideoCodec: only PyAV and numpy. :func:`demux_gops` seeks to each requested GOP's keyframe,
reads packets in decode order, converts MP4/MKV length-prefixed NAL units (AVCC/HVCC) to
Annex B start codes with FFmpeg's ``*_mp4toannexb`` bitstream filters (which also put the
SPS/PPS in-band before every IDR/IRAP picture) and packs them into a :class:`PacketBundle`,
flagging the packets of non-reference pictures from their NAL headers
(:func:`vidloader.decoding.nvdec._nal.nonreference_flags`, ``PacketBundle.is_nonref``).

Which packets a GOP needs: the decoder is always flushed after a GOP's packets, so it outputs
every frame it has decoded; no reorder look-ahead is needed. To output display frames
``k .. last`` the decoder must have been fed every packet whose pts is one of
``pts[k .. last]``, and every packet before those in decode order (the references they use,
which may be displayed later, e.g. the P-frame that B-frames predict from). So reading stops at
the first packet after which all of ``pts[k .. last]`` have been seen. That may cross the next
keyframe: with open GOPs the last frames of a GOP in display order follow the next keyframe in
decode order. Packets displayed before the keyframe (open-GOP leading pictures) are dropped:
they belong to the previous GOP and cannot be decoded from this entry point.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

from ...errors import CorruptVideoError, UnsupportedCodecError, VideoNotFoundError
from ...index import VideoRecord
from .._base import GopRequest
from ._bundle import PacketBundle, concat_bundles
from ._nal import nonreference_flags

__all__ = ["ContainerCache", "PacketBundle", "concat_bundles", "demux_gops", "full_gop_requests"]

#: Bitstream filter turning each codec's MP4 packets into Annex B.
ANNEXB_FILTERS = {"h264": "h264_mp4toannexb", "hevc": "hevc_mp4toannexb"}

#: Open files a :class:`ContainerCache` keeps by default (an open MP4 costs its sample index
#: and a 32 KiB I/O buffer; re-opening costs ~2 ms, see :class:`_OpenVideo`).
DEFAULT_OPEN_CONTAINERS = 32

#: Options for opening a file only to demux it. ``avformat_find_stream_info`` otherwise decodes
#: frames to fill in codec parameters that the index already has: ~30 ms per 1080p H.264 MP4,
#: against ~2 ms with ``skip_frame=all`` (measured with PyAV 18).
_DEMUX_ONLY_OPTIONS = {"skip_frame": "all"}


class _OpenVideo:
    """An open container, its video stream and the stream's Annex B filter."""

    def __init__(self, record: VideoRecord) -> None:
        import av

        self.path = record.path
        try:
            self.container = av.open(record.path, "r", options=_DEMUX_ONLY_OPTIONS)
        except FileNotFoundError as exc:
            raise VideoNotFoundError(record.path, "no such file; check the path (or the index is stale)") from exc
        except av.FFmpegError as exc:
            raise CorruptVideoError(record.path, f"FFmpeg cannot open it ({exc})") from exc
        streams = [s for s in self.container.streams if s.index == record.stream_index]
        if not streams or streams[0].type != "video":
            self.close()
            raise CorruptVideoError(record.path, f"stream {record.stream_index} is not a video stream")
        self.stream = streams[0]
        self.bsf = av.BitStreamFilterContext(ANNEXB_FILTERS[record.codec], self.stream)

    def close(self) -> None:
        self.container.close()


class ContainerCache:
    """Keeps up to ``max_open`` files open (LRU), so demuxing GOP after GOP skips re-opening.

    Not thread-safe: give each thread (or worker process) its own.

    Args:
        max_open: bound on open files; the least recently used is closed beyond it.
    """

    def __init__(self, max_open: int = DEFAULT_OPEN_CONTAINERS) -> None:
        self.max_open = max(1, int(max_open))
        self._open: OrderedDict[tuple[str, int], _OpenVideo] = OrderedDict()

    def get(self, record: VideoRecord) -> _OpenVideo:
        key = (record.path, record.stream_index)
        video = self._open.pop(key, None) or _OpenVideo(record)
        self._open[key] = video
        while len(self._open) > self.max_open:
            self._open.popitem(last=False)[1].close()
        return video

    def discard(self, record: VideoRecord) -> None:
        """Close a file (after an error left its demuxer in an unknown state)."""
        video = self._open.pop((record.path, record.stream_index), None)
        if video is not None:
            video.close()

    def close(self) -> None:
        while self._open:
            self._open.popitem()[1].close()

    def __len__(self) -> int:
        return len(self._open)


def check_demuxable(record: VideoRecord) -> None:
    """Raise :class:`UnsupportedCodecError` unless the codec has an Annex B filter."""
    if record.codec not in ANNEXB_FILTERS:
        raise UnsupportedCodecError(
            record.path,
            f"codec {record.codec!r} cannot be demuxed for NVDEC separation mode "
            f"(supported: {', '.join(ANNEXB_FILTERS)}); use backend='cpu' for this file",
        )


def full_gop_requests(record: VideoRecord, gops: Sequence[GopRequest]) -> list[GopRequest]:
    """The same GOPs, each asking for every frame up to its end (to cache whole GOPs)."""
    ends = np.append(record.keyframes[1:], record.num_frames) - 1
    out = []
    for g in gops:
        pos = int(np.searchsorted(record.keyframes, g.keyframe))
        out.append(GopRequest(g.keyframe, np.arange(g.keyframe, ends[pos] + 1, dtype=np.int64)))
    return out


def demux_gops(
    record: VideoRecord,
    gops: Sequence[GopRequest],
    *,
    container_cache: ContainerCache | None = None,
) -> PacketBundle:
    """Demux the packets that decode every wanted frame of ``gops``, as Annex B.

    Args:
        record: the video.
        gops: GOPs in any order; each yields the packets from its keyframe to the point where
            all frames ``keyframe .. last wanted`` can be output after a flush.
        container_cache: reuse open files across calls (one cache per thread); without one
            the file is opened and closed here.

    Returns:
        A :class:`PacketBundle` with one GOP per request, in request order.

    Raises:
        UnsupportedCodecError: not H.264 or HEVC.
        VideoNotFoundError / CorruptVideoError: naming the file.
    """
    import av

    check_demuxable(record)
    cache = container_cache if container_cache is not None else ContainerCache(1)
    try:
        video = cache.get(record)
        parts = [_demux_one(video, record, g, i) for i, g in enumerate(gops)]
    except av.FFmpegError as exc:
        cache.discard(record)
        raise CorruptVideoError(record.path, f"demuxing failed ({exc})") from exc
    finally:
        if container_cache is None:
            cache.close()
    return _pack(record, parts)


class _GopPackets:
    """Packets of one GOP as collected by :func:`_demux_one`."""

    def __init__(self, gop_index: int, keyframe: int, last: int) -> None:
        self.gop_index, self.keyframe, self.last = gop_index, keyframe, last
        self.data: list[bytes] = []
        self.pts: list[int] = []
        self.is_key: list[int] = []


def _demux_one(video: _OpenVideo, record: VideoRecord, gop: GopRequest, gop_index: int) -> _GopPackets:
    key_pts = int(record.pts[gop.keyframe])
    need = set(record.pts[gop.keyframe : gop.last + 1].tolist())
    out = _GopPackets(gop_index, gop.keyframe, gop.last)
    # A seek by pts can land after the keyframe where a GOP is shorter than the B-frame delay
    # (the next keyframe's dts is then <= our pts); a second pass scans from the start.
    for target in (key_pts, None):
        if _read_gop(video, record, key_pts, need, out, target):
            return out
    raise CorruptVideoError(
        record.path, f"keyframe {gop.keyframe} (pts {key_pts}) was not found by seeking; "
        "the index is stale or the file is damaged",
    )


def _read_gop(video: _OpenVideo, record, key_pts: int, need: set, out: _GopPackets, target) -> bool:
    """Seek and collect; False if the keyframe was missed (the caller retries from the start)."""
    stream = video.stream
    start = target if target is not None else int(record.pts[0]) - (1 << 40)
    video.container.seek(start, stream=stream, backward=True, any_frame=False)
    video.bsf.flush()  # the filter tracks parameter sets across packets; a seek resets that
    started = False
    for packet in video.container.demux(stream):
        if packet.size == 0:
            continue  # demuxer flush packet: no data
        t = packet.pts if packet.pts is not None else packet.dts
        if t is None:
            raise CorruptVideoError(record.path, "a video packet has neither pts nor dts")
        if not started:
            if packet.is_keyframe and t == key_pts:
                started = True
            elif packet.dts is not None and packet.dts > key_pts:
                return False  # decode order is past our keyframe: it was skipped
            else:
                continue
        if t < key_pts:
            continue  # open-GOP leading picture: belongs to the previous GOP
        _append(video, packet, t, out)
        need.discard(t)
        if not need:
            return True
    if not started:
        return False
    missing = min(need)
    raise CorruptVideoError(
        record.path, f"the file ends before the packet of pts {missing}; it is truncated or "
        "the index is stale",
    )


def _append(video: _OpenVideo, packet, t: int, out: _GopPackets) -> None:
    key = int(packet.is_keyframe)  # read first: filtering takes the packet's data and flags
    for filtered in video.bsf.filter(packet):
        out.data.append(bytes(filtered))
        out.pts.append(t)
        out.is_key.append(key)


def _pack(record: VideoRecord, parts: list[_GopPackets]) -> PacketBundle:
    sizes = np.fromiter((len(d) for p in parts for d in p.data), np.int64)
    offsets = np.zeros(len(sizes), np.int64)
    np.cumsum(sizes[:-1], out=offsets[1:])
    payload = np.frombuffer(b"".join(d for p in parts for d in p.data), np.uint8)
    gop_id = np.concatenate([np.full(len(p.data), p.gop_index, np.int64) for p in parts]) if parts else np.empty(0, np.int64)
    return PacketBundle(
        record.path, record.codec, payload, offsets, sizes,
        pts=np.fromiter((t for p in parts for t in p.pts), np.int64),
        is_key=np.fromiter((k for p in parts for k in p.is_key), np.int64),
        is_nonref=nonreference_flags(payload, offsets, sizes, record.codec),
        gop_id=gop_id,
        gop_keyframes=np.fromiter((p.keyframe for p in parts), np.int64, len(parts)),
        gop_last=np.fromiter((p.last for p in parts), np.int64, len(parts)),
    )
