"""Separation-mode demux: the packets an NVDEC decoder needs, in the form it parses, without
any GPU.

This module runs in CPU worker processes, so it imports neither ``torch.cuda`` nor
PyNvVideoCodec: only PyAV and numpy. :func:`demux_gops` seeks to each requested GOP's keyframe,
reads packets in decode order, puts them in the form NVDEC's parser takes and packs them into
a :class:`PacketBundle`, flagging the packets of non-reference pictures from their NAL headers
(:func:`vidloader.decoding.nvdec._nal.nonreference_flags`, ``PacketBundle.is_nonref``).

The form, per codec, as PyNvVideoCodec's own demuxer (``FFmpegDemuxer``) feeds NVDEC:

* H.264, HEVC: MP4/MKV length-prefixed NAL units (AVCC/HVCC) become Annex B start codes with
  FFmpeg's ``h264_mp4toannexb`` / ``hevc_mp4toannexb`` bitstream filters (through PyAV),
  which also put the SPS/PPS in-band before every IDR/IRAP picture;
* AV1: MP4/MKV/WebM samples already are what NVDEC takes, temporal units of OBUs in the
  low-overhead format (AV1 spec section 5): no filter. A key frame whose packet lacks the
  sequence header OBU (allowed when the container's ``av1C`` carries it) gets the one from
  the extradata in front, so every GOP decodes on its own;
* VP9: packets as they are (superframes with hidden frames included: NVDEC splits them).

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

from ..._utils._av import open_input
from ...errors import CorruptVideoError, UnsupportedCodecError, VideoNotFoundError
from ...index import VideoRecord
from ...index._codecs import display_name
from .._base import GopRequest
from ._bundle import PacketBundle, PayloadSink, concat_bundles
from ._nal import nonreference_flags

__all__ = ["ContainerCache", "PacketBundle", "PayloadSink", "concat_bundles", "demux_gops",
           "full_gop_requests"]

#: Bitstream filter turning each codec's MP4 packets into what NVDEC parses (``None``: the
#: packets as they are).
ANNEXB_FILTERS = {"h264": "h264_mp4toannexb", "hevc": "hevc_mp4toannexb", "av1": None, "vp9": None}

#: AV1 OBU type of a sequence header (AV1 spec 6.2.2).
_OBU_SEQUENCE_HEADER = 1

#: Open files a :class:`ContainerCache` keeps by default (an open MP4 costs its sample index
#: and a 32 KiB I/O buffer; re-opening costs ~2 ms, see :class:`_OpenVideo`).
DEFAULT_OPEN_CONTAINERS = 32

#: Options for opening a file only to demux it. ``avformat_find_stream_info`` otherwise decodes
#: frames to fill in codec parameters that the index already has: ~30 ms per 1080p H.264 MP4,
#: against ~2 ms with ``skip_frame=all`` (measured with PyAV 18).
_DEMUX_ONLY_OPTIONS = {"skip_frame": "all"}


class _OpenVideo:
    """An open container, its video stream and what turns its packets into NVDEC's input."""

    def __init__(self, record: VideoRecord) -> None:
        import av

        self.path = record.path
        record.check_unchanged()  # a replaced file must not be demuxed under the old frame table
        try:
            self.container = open_input(record.path, options=_DEMUX_ONLY_OPTIONS)
        except FileNotFoundError as exc:
            raise VideoNotFoundError(record.path, "no such file; check the path (or the index is stale)") from exc
        except av.FFmpegError as exc:
            raise CorruptVideoError(record.path, f"FFmpeg cannot open it ({exc})") from exc
        streams = [s for s in self.container.streams if s.index == record.stream_index]
        if not streams or streams[0].type != "video":
            self.close()
            raise CorruptVideoError(record.path, f"stream {record.stream_index} is not a video stream")
        self.stream = streams[0]
        self._check_picture_size(record)
        name = ANNEXB_FILTERS[record.codec]
        self.bsf = av.BitStreamFilterContext(name, self.stream) if name else None
        self.av1_sequence_header = (
            av1_sequence_header(bytes(self.stream.codec_context.extradata or b""))
            if record.codec == "av1" else b""
        )

    def _check_picture_size(self, record: VideoRecord) -> None:
        """The container's picture size against the index's: a file replaced by another of the
        same byte size and modification time passes :meth:`VideoRecord.check_unchanged`, and
        NVDEC, configured for the indexed size, then decodes its smaller pictures into the
        larger surface without an error (seen on the H100: wrong pixels delivered)."""
        cc = self.stream.codec_context
        got = (int(cc.width or 0), int(cc.height or 0))
        if 0 in got or got == (record.width, record.height):  # 0: the container does not say
            return
        self.close()
        raise CorruptVideoError(
            record.path, f"its pictures are {got[0]}x{got[1]}, the index records "
            f"{record.width}x{record.height}: the file was replaced after indexing. Re-index it",
        )

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
        video = self._open.pop(key, None)
        if video is not None:
            try:
                record.check_unchanged()  # rewritten in place while open: see the CPU executor
            except BaseException:
                video.close()
                raise
        video = video or _OpenVideo(record)
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
    """Raise :class:`UnsupportedCodecError` unless packets of the codec can be put in NVDEC's
    form (the message names the codec, never FFmpeg's decoder for it)."""
    if record.codec not in ANNEXB_FILTERS:
        supported = ", ".join(display_name(c) for c in ANNEXB_FILTERS)
        raise UnsupportedCodecError(
            record.path,
            f"{display_name(record.codec)} cannot be demuxed for NVDEC (vidloader's NVDEC path "
            f"takes {supported}); use backend='cpu' for this file",
        )


def av1_sequence_header(extradata: bytes) -> bytes:
    """The sequence header OBU of an AV1 stream's extradata (an ISO-BMFF ``av1C`` record, or
    the bare OBUs Matroska gives), ``b""`` if there is none."""
    if extradata[:1] and extradata[0] & 0x80:  # av1C: marker bit, 3 more header bytes
        extradata = extradata[4:]
    for start, end, obu_type in _obus(extradata):
        if obu_type == _OBU_SEQUENCE_HEADER:
            return extradata[start:end]
    return b""


def _obus(data: bytes):
    """``(start, end, type)`` of each OBU of low-overhead AV1 data (stops at anything odd)."""
    i = 0
    while i < len(data):
        header = data[i]
        obu_type, has_ext, has_size = (header >> 3) & 15, (header >> 2) & 1, (header >> 1) & 1
        j = i + 1 + has_ext
        if not has_size:
            yield i, len(data), obu_type  # the rest of the data
            return
        size, shift = 0, 0
        while j < len(data):
            byte = data[j]
            j += 1
            size |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
        if j + size > len(data):
            return
        yield i, j + size, obu_type
        i = j + size


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
    sink: PayloadSink | None = None,
) -> PacketBundle:
    """Demux the packets that decode every wanted frame of ``gops``, in NVDEC's input form.

    Args:
        record: the video.
        gops: GOPs in any order; each yields the packets from its keyframe to the point where
            all frames ``keyframe .. last wanted`` can be output after a flush.
        container_cache: reuse open files across calls (one cache per thread); without one
            the file is opened and closed here.
        sink: where the packets' bytes go (a demux worker's shared-memory segment): each
            packet is copied once, from FFmpeg's buffer to the sink, and the bundle's payload
            is the sink's view of them. Without one, the payload is a new array. On an error
            the sink is cut back to where this call began.

    Returns:
        A :class:`PacketBundle` with one GOP per request, in request order.

    Raises:
        UnsupportedCodecError: not H.264, HEVC, AV1 or VP9.
        VideoNotFoundError / CorruptVideoError: naming the file.
    """
    import av

    check_demuxable(record)
    cache = container_cache if container_cache is not None else ContainerCache(1)
    start = sink.tell() if sink is not None else 0
    try:
        video = cache.get(record)
        parts = [_demux_one(video, record, g, i, sink) for i, g in enumerate(gops)]
        if sink is None:
            payload = np.frombuffer(b"".join(d for p in parts for d in p.data), np.uint8)
        else:
            payload = sink.view(start, sink.tell())
        return _pack(record, parts, payload)
    except BaseException as exc:
        if sink is not None:
            sink.truncate(start)  # a GOP's packets may be in it already
        if isinstance(exc, av.FFmpegError):
            cache.discard(record)
            raise CorruptVideoError(record.path, f"demuxing failed ({exc})") from exc
        raise
    finally:
        if container_cache is None:
            cache.close()


class _GopPackets:
    """Packets of one GOP as collected by :func:`_demux_one`: their bytes (``data``, unless
    they went to a sink), sizes, timestamps and key flags."""

    def __init__(self, gop_index: int, keyframe: int, last: int) -> None:
        self.gop_index, self.keyframe, self.last = gop_index, keyframe, last
        self.data: list[bytes] = []
        self.sizes: list[int] = []
        self.pts: list[int] = []
        self.is_key: list[int] = []

    def keep(self, data, t: int, key: int, sink: PayloadSink | None) -> None:
        """One packet: ``data`` is anything with the buffer protocol (bytes, a PyAV packet)."""
        view = memoryview(data)
        if sink is None:
            self.data.append(view.tobytes())
        else:
            sink.write(view)
        self.sizes.append(view.nbytes)
        self.pts.append(t)
        self.is_key.append(key)


def _demux_one(video: _OpenVideo, record: VideoRecord, gop: GopRequest, gop_index: int,
               sink: PayloadSink | None) -> _GopPackets:
    key_pts = int(record.pts[gop.keyframe])
    need = set(record.pts[gop.keyframe : gop.last + 1].tolist())
    out = _GopPackets(gop_index, gop.keyframe, gop.last)
    # A seek by pts can land after the keyframe where a GOP is shorter than the B-frame delay
    # (the next keyframe's dts is then <= our pts); a second pass scans from the start.
    for target in (key_pts, None):
        if _read_gop(video, record, key_pts, need, out, target, sink):
            return out
    raise CorruptVideoError(
        record.path, f"keyframe {gop.keyframe} (pts {key_pts}) was not found by seeking; "
        "the index is stale or the file is damaged",
    )


def _read_gop(video: _OpenVideo, record, key_pts: int, need: set, out: _GopPackets, target,
              sink: PayloadSink | None) -> bool:
    """Seek and collect; False if the keyframe was missed (the caller retries from the start;
    nothing was kept then)."""
    stream = video.stream
    start = target if target is not None else int(record.pts[0]) - (1 << 40)
    video.container.seek(start, stream=stream, backward=True, any_frame=False)
    if video.bsf is not None:
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
        _append(video, packet, t, out, sink)
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


def _append(video: _OpenVideo, packet, t: int, out: _GopPackets, sink: PayloadSink | None) -> None:
    key = int(packet.is_keyframe)  # read first: filtering takes the packet's data and flags
    if video.bsf is None:
        data = packet
        if key and video.av1_sequence_header:
            data = bytes(packet)
            if not any(k == _OBU_SEQUENCE_HEADER for _, _, k in _obus(data)):
                data = video.av1_sequence_header + data
        out.keep(data, t, key, sink)
        return
    for filtered in video.bsf.filter(packet):
        out.keep(filtered, t, key, sink)


def _pack(record: VideoRecord, parts: list[_GopPackets], payload: np.ndarray) -> PacketBundle:
    """The bundle of ``parts``, whose packets lie back to back in ``payload``."""
    sizes = np.fromiter((n for p in parts for n in p.sizes), np.int64)
    offsets = np.zeros(len(sizes), np.int64)
    np.cumsum(sizes[:-1], out=offsets[1:])
    gop_id = np.concatenate([np.full(len(p.sizes), p.gop_index, np.int64) for p in parts]) if parts else np.empty(0, np.int64)
    return PacketBundle(
        record.path, record.codec, payload, offsets, sizes,
        pts=np.fromiter((t for p in parts for t in p.pts), np.int64),
        is_key=np.fromiter((k for p in parts for k in p.is_key), np.int64),
        is_nonref=nonreference_flags(payload, offsets, sizes, record.codec),
        gop_id=gop_id,
        gop_keyframes=np.fromiter((p.keyframe for p in parts), np.int64, len(parts)),
        gop_last=np.fromiter((p.last for p in parts), np.int64, len(parts)),
    )
