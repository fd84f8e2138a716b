"""The PyNvVideoCodec side of the NVDEC executor: decoders, the GOP loop, frame → tensor.

A :class:`DecoderSlot` owns one CUDA stream and one low-level ``PyNvDecoder`` per codec and
surface format (NV12 for 8-bit video, P016 for 10/12-bit: a decoder's surfaces are allocated
for one bit depth, so the two never share a decoder),
created with ``usedevicememory=True`` on that stream and reused across videos: a decoder is
flushed (empty packet) after every GOP, told the new size (``setReconfigParams``) when the
picture size changes within its maximum, and re-created only when a video is larger than that
maximum or when a flushed decoder turns out not to accept new packets.

H.264 and HEVC packets are fed in chunks of up to :data:`FEED_PACKETS` access units per
``Decode`` call (Annex B is self-delimiting, so concatenated access units are a valid stream for
NVDEC's parser). One call per packet made each thread wait for every picture in turn: on the
W4 clips (340p/720p H.264) on an H100, 16 threads fed packet by packet reached 4,900 packets/s
with NVDEC mostly idle, and the same threads fed whole GOPs 10,800
(``benchmarks/results/gpu/session8-2/feed.log``). AV1 and VP9 frames carry no start codes, so
they are still fed one by one.

Output frames are matched to display indices without trusting the container's timestamps to
survive NVDEC. Fed one by one, each packet goes with ``pts = 1 + its rank in display order``;
if ``DecodedFrame.getPTS()`` returns that rank, frames map by it (robust to dropped frames);
otherwise they map by counting, since with ``latency=NATIVE`` frames leave in display order.
The first frame a slot ever outputs decides which (:attr:`DecoderSlot.pts_mode`). Chunks
carry one timestamp for several pictures, so chunked GOPs always map by counting, and a GOP
that outputs fewer frames than it was fed raises :class:`CorruptVideoError`.

Verified with PyNvVideoCodec 2.2.4 on an H200 (``vidloader bench probe``): ``getPTS()``
returns the pts of hand-built packets (with or without the TIMESTAMP flag), so frames map by
rank; a flushed decoder decodes the next GOP bit-exactly; ``setReconfigParams`` is required
before a smaller video (without it the old output size is kept); a video larger than the
decoder's maximum raises "Reconfigure Not supported", hence re-creation; DLPack exports NV12
as a compact ``(H*3/2, W)`` uint8 tensor; output buffers are recycled by the next ``Decode``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from ...errors import CorruptVideoError, UnsupportedCodecError
from ...index import VideoRecord
from ...processing._nv12 import nv12_rows
from .._memory import gpu_memory_error, is_gpu_out_of_memory
from ._bundle import PacketBundle
from ._caps import NVDEC_CODECS, describe_stream
from ._status_tap import StatusTap

log = logging.getLogger(__name__)

#: ``PacketData.decode_flag`` for every packet: TIMESTAMP (2), so the pts travels with the
#: picture, and ENDOFPICTURE (8), since each demuxed packet is exactly one access unit; it
#: lets the parser hand a picture to the decoder without waiting for the next packet.
DEFAULT_PACKET_FLAGS = 2 | 8
ENDOFPICTURE = 8

#: Whether a slot waits for its stream before a ``Decode`` call that follows one which returned
#: frames. The next call recycles those frames' buffers, and which CUDA stream the binding
#: writes them on is not established (its ``__cuda_array_interface__`` reports stream 2, the
#: per-thread default stream, not the stream we pass). Waiting makes every read of a frame
#: (conversion, clone) finish before its buffer can be reused, whatever that stream is. The
#: probe ``vidloader bench probe`` (facts → ``stream_order``) tells whether it can go.
SYNC_BEFORE_RECYCLE = True

#: Access units per ``Decode`` call for the codecs in :data:`CHUNKED_CODECS` (1: one by one).
#: A chunk's pictures are decoded back to back while earlier ones are displayed; each call
#: returns up to about this many frames, whose surfaces PyNvVideoCodec keeps until the next
#: call, so the value also bounds the output surfaces a decoder holds.
FEED_PACKETS = 16
#: Codecs whose packets (Annex B access units) may be concatenated into one ``Decode`` call.
CHUNKED_CODECS = frozenset({"h264", "hevc"})

#: Called for each output frame: ``(display_index or -1, nv12 view)``; the view is valid only
#: until the decoder is called again.
OnFrame = Callable[[int, torch.Tensor], None]
#: Whether the caller wants display index ``i`` (frames it does not want get no view at all).
Wants = Callable[[int], bool]


def nv12_view(frame: Any, height: int, width: int, device: torch.device, *,
              deep: bool = False, path: str = "") -> torch.Tensor:
    """A decoded frame as a ``(H + ⌈H/2⌉) × pitch`` CUDA tensor, zero-copy via DLPack where the
    frame exports one (a copy of the planes otherwise): uint8 NV12, or with ``deep`` (10/12-bit
    video) uint16 P016. A 16-bit surface exported as int16, or as bytes (``2·W`` uint8 columns),
    is reinterpreted as uint16 without a copy.

    Raises:
        CorruptVideoError: the surface is smaller than ``height`` × ``width`` (the video
            ``path`` is not the one indexed, or changes size mid-stream).
    """
    rows = nv12_rows(height)
    try:
        t = _as_surface(torch.from_dlpack(frame), deep)
        if t is not None and t.dim() == 2 and t.shape[0] >= rows and t.shape[1] >= width:
            return t
    except (TypeError, RuntimeError, BufferError) as exc:
        log.debug("DLPack export failed (%s); copying planes via __cuda_array_interface__", exc)
    raw = frame.cuda()
    # Checked before any reshape: a smaller surface used to end in an untyped RuntimeError.
    _check_plane_bytes(raw, height, width, rows, 2 if deep else 1, path)
    planes = [_as_surface(torch.as_tensor(p, device=device), deep).reshape(-1) for p in raw]
    y = planes[0][: height * width].reshape(height, width)
    uv = planes[1][: (rows - height) * width].reshape(rows - height, width)
    return torch.cat([y, uv], 0) if not deep else torch.cat([y.view(torch.int16), uv.view(torch.int16)], 0).view(torch.uint16)


def _plane_bytes(plane: Any) -> tuple[int, tuple[int, ...]]:
    """Bytes and shape of a ``__cuda_array_interface__`` plane."""
    cai = plane.__cuda_array_interface__
    shape = tuple(int(d) for d in cai["shape"])
    return int(np.prod(shape)) * np.dtype(cai["typestr"]).itemsize, shape


def _check_plane_bytes(planes: list, height: int, width: int, rows: int, sample_bytes: int,
                       path: str) -> None:
    """Raise :class:`CorruptVideoError` unless the luma and chroma planes hold at least the
    ``height`` × ``width`` picture the index records."""
    (y_bytes, y_shape), (uv_bytes, _) = (_plane_bytes(p) for p in planes[:2])
    if y_bytes >= height * width * sample_bytes and uv_bytes >= (rows - height) * width * sample_bytes:
        return
    got = "x".join(str(d) for d in reversed(y_shape[:2]))
    raise CorruptVideoError(
        path, f"NVDEC decoded a picture of {got} samples, smaller than the {width}x{height} the "
        "index records: the file was replaced after indexing by one of the same byte size and "
        "modification time, or its picture size changes mid-stream. Re-index it (or re-encode "
        "it to one picture size)",
    )


def _as_surface(t: torch.Tensor, deep: bool) -> torch.Tensor | None:
    """``t`` as a 2-D uint8 (NV12) or uint16 (P016) tensor, or ``None`` if it is neither."""
    if t.dim() == 3 and t.shape[-1] == 1:
        t = t[..., 0]
    if not deep:
        return t if t.dtype == torch.uint8 else None
    if t.dtype in (torch.uint16, torch.int16):
        return t.view(torch.uint16)
    if t.dtype == torch.uint8 and t.dim() == 2 and t.stride(-1) == 1 and t.shape[-1] % 2 == 0:
        return t.view(torch.uint16)  # the bytes of 16-bit samples: pairs become samples
    return None


def current_cuda_context() -> int:
    """The calling thread's current CUcontext handle (0 if none), read from the driver."""
    import ctypes

    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return 0
    ctx = ctypes.c_void_p()
    return int(ctx.value or 0) if lib.cuCtxGetCurrent(ctypes.byref(ctx)) == 0 else 0


def _create(nvc, codec: str, gpu: int, stream: int, max_w: int, max_h: int):
    kwargs = dict(
        gpuid=gpu,
        codec=getattr(nvc.cudaVideoCodec, NVDEC_CODECS[codec]),
        cudacontext=0,
        cudastream=stream,
        usedevicememory=True,  # overload 1 would match first and default to host memory
        maxwidth=max_w,
        maxheight=max_h,
        outputColorType=nvc.OutputColorType.NATIVE,
        latency=nvc.DisplayDecodeLatencyType.NATIVE,
    )
    try:
        return nvc.CreateDecoder(**kwargs)
    except Exception as exc:
        # If the binding's own context does not own torch's stream, hand it torch's context
        # (the primary context, current in this thread since the stream was created).
        ctx = current_cuda_context()
        if not ctx or "context" not in str(exc).lower():
            raise
        log.info("CreateDecoder with cudacontext=0 failed (%s); passing the current context", exc)
        return nvc.CreateDecoder(**{**kwargs, "cudacontext": ctx})


class _Decoder:
    """One ``PyNvDecoder`` and the size it is configured for (one codec, one surface format)."""

    def __init__(self, nvc, codec: str, gpu: int, stream: int, max_w: int, max_h: int) -> None:
        self.codec, self.max_w, self.max_h = codec, max_w, max_h
        self.handle = _create(nvc, codec, gpu, stream, max_w, max_h)
        self.size: tuple[int, int] | None = None
        self.flushed = False  # an end-of-stream packet went through since creation


class DecoderSlot:
    """Decoders sharing one CUDA stream; serves one thread at a time.

    Args:
        nvc: the imported PyNvVideoCodec module.
        device: CUDA device index.
        max_width, max_height: initial decoder maximum (0: the first video's size); decoders
            grow (are re-created) when a larger video comes.
        packet_flags: ``PacketData.decode_flag`` for every packet.
        skip_nonref: drop the packets of non-reference pictures no request wants
            (``PacketBundle.is_nonref``), as FFmpeg's ``skip_frame=NONREF`` does on the CPU.
        feed_packets: access units per ``Decode`` call for H.264 and HEVC (1: one by one).
        stream: the CUDA stream its decoders and conversions run on (default a new one).
        status: the NVDEC status tap (:mod:`._status_tap`) that vouches for each GOP, or
            ``None`` (no check: NVDEC's concealed damage goes through).
    """

    def __init__(self, nvc, device: int, *, max_width: int = 0, max_height: int = 0,
                 packet_flags: int = DEFAULT_PACKET_FLAGS, skip_nonref: bool = True,
                 feed_packets: int | None = None, stream=None,
                 status: StatusTap | None = None) -> None:
        self.nvc, self.gpu = nvc, int(device)
        self.device = torch.device("cuda", self.gpu)
        self.stream = stream if stream is not None else torch.cuda.Stream(self.device)
        self.max_width, self.max_height = int(max_width), int(max_height)
        self.packet_flags = int(packet_flags)
        self.skip_nonref = bool(skip_nonref)
        self.feed_packets = max(1, int(FEED_PACKETS if feed_packets is None else feed_packets))
        self._decoders: dict[tuple[str, bool], _Decoder] = {}  # (codec, deep) -> decoder
        self.pts_mode: str | None = None  # "frame" (getPTS carries our rank) or "count"
        self.reuse_after_flush: bool | None = None  # learnt on the first reuse
        self.recreated = 0
        self._frames_out = False  # the last Decode returned frames that may still be read
        self.status = status

    def _decoder(self, record: VideoRecord) -> _Decoder:
        if record.codec not in NVDEC_CODECS:
            what = describe_stream(record.codec, record.profile, record.bit_depth, record.chroma_format)
            raise UnsupportedCodecError(record.path, f"{what}: vidloader's NVDEC path decodes "
                                        "H.264, HEVC, AV1 and VP9 only; use backend='cpu' for it")
        dec = self._decoders.get(_key(record))
        w, h = record.width, record.height
        if dec is None or w > dec.max_w or h > dec.max_h or (dec.flushed and self.reuse_after_flush is False):
            dec = self._new_decoder(record, dec)
        if dec.size not in (None, (w, h)):
            # Required: without it a reused decoder keeps its previous output size (verified).
            dec.handle.setReconfigParams(w, h)
        dec.size = (w, h)
        return dec

    def _new_decoder(self, record: VideoRecord, old: _Decoder | None) -> _Decoder:
        max_w = max(self.max_width, record.width, old.max_w if old else 0)
        max_h = max(self.max_height, record.height, old.max_h if old else 0)
        self._decoders.pop(_key(record), None)
        try:
            dec = _Decoder(self.nvc, record.codec, self.gpu, self.stream.cuda_stream, max_w, max_h)
        except Exception as exc:  # the binding raises its own exception types
            what = describe_stream(record.codec, record.profile, record.bit_depth, record.chroma_format)
            if is_gpu_out_of_memory(exc):  # not this file's fault: never a skip or a fallback
                raise gpu_memory_error(
                    exc, f"an NVDEC decoder's surfaces ({what}, up to {max_w}x{max_h}, for "
                    f"{record.path})", self.gpu) from exc
            raise UnsupportedCodecError(
                record.path, f"NVDEC on GPU {self.gpu} cannot create a decoder for {what} "
                f"{record.width}x{record.height} ({exc}); use backend='cpu' for it",
            ) from exc
        self._decoders[_key(record)] = dec
        self.recreated += 1
        return dec

    def decode_gop(self, record: VideoRecord, bundle: PacketBundle, g: int, wanted: np.ndarray,
                   on_frame: OnFrame, *, wants: Wants | None = None,
                   retry: bool = True, alone: bool = False) -> tuple[int, int]:
        """Feed GOP ``g`` of ``bundle`` up to what the frames ``wanted`` (sorted display
        indices) need, flush, and call ``on_frame`` for every output frame (with ``wants``,
        only for the frames it accepts: the others are counted but never viewed). With
        :attr:`skip_nonref`, packets of non-reference pictures that are not wanted are not
        fed at all (nothing else depends on them). Returns ``(packets fed, frames output)``.

        Runs on :attr:`stream` (the caller makes it current).

        With a status tap (:attr:`status`), the GOP is checked after its flush: if NVDEC
        reported a decode error meanwhile, it raises :class:`SuspectGopError` instead of
        returning, so ``on_frame`` must keep the frames it is given until this returns (the
        caller delivers nothing of a GOP that raises). With ``alone``, the GOP is decoded
        while no other GOP is (in this process), so a decode error is its own.

        Raises:
            CorruptVideoError: NVDEC rejected the packets (after one retry on a fresh decoder).
            SuspectGopError: NVDEC reported a (concealed) decode error while the GOP was
                decoded (a :class:`CorruptVideoError`).
            GpuMemoryError: the GPU had no memory for the decoder or its surfaces (no retry:
                a fresh decoder needs the same memory).
        """
        dec = self._decoder(record)
        feed = _packets_to_feed(record, bundle, g, wanted, skip_nonref=self.skip_nonref)
        reused = dec.flushed  # this decoder already went through an end of stream
        chunk = self.feed_packets if record.codec in CHUNKED_CODECS else 1
        counter = _FrameCounter(self, record, feed, bundle, wants=wants, by_count=chunk > 1)
        why = None
        try:
            status = self.status
            mark = status.mark(alone=alone) if status is not None else None  # before the first Decode
            try:
                self._run(dec, bundle, feed, counter, on_frame, chunk)
                why = status.verify(mark) if status is not None else None  # leaves the gate
            finally:
                if status is not None:
                    status.leave(mark)  # a failed GOP (once verified: nothing)
        except BaseException as exc:
            # Fed but not flushed (a sink or decode error): its leftovers would come out with
            # the next GOP, so it is dropped and re-created on next use.
            self._decoders.pop(_key(record), None)
            if not isinstance(exc, _DecodeFailure):
                raise
            if retry and counter.count == 0:
                log.info("%s: NVDEC failed (%s); retrying on a fresh decoder", record.path, exc.__cause__)
                return self.decode_gop(record, bundle, g, wanted, on_frame, wants=wants, retry=False,
                                       alone=alone)
            raise CorruptVideoError(record.path, f"NVDEC failed in the GOP at keyframe "
                                    f"{int(bundle.gop_keyframes[g])}: {exc.__cause__}") from exc.__cause__
        out = counter.count
        if out == 0 and len(feed) and reused and self.reuse_after_flush is None:
            log.info("a flushed NVDEC decoder output nothing: re-creating decoders after each GOP")
            self.reuse_after_flush = False
            return self.decode_gop(record, bundle, g, wanted, on_frame, wants=wants, alone=alone)
        if out and reused and self.reuse_after_flush is None:
            self.reuse_after_flush = True
        if why is not None:
            # The decoder was flushed: it stays in use. The whole GOP is distrusted: errors
            # propagate to the pictures that reference the damaged one.
            key = int(bundle.gop_keyframes[g])
            raise SuspectGopError(record.path, f"the NVDEC decode of the GOP of frames {key}.."
                                  f"{_gop_end(record, key)} is not trusted: {why}{_FIX if alone else ''}",
                                  alone=alone)
        return len(feed), out

    def _run(self, dec: _Decoder, bundle: PacketBundle, feed: np.ndarray, counter: _FrameCounter,
             on_frame: OnFrame, chunk: int = 1) -> None:
        payload = bundle.payload  # referenced until the last Decode returns
        base = payload.ctypes.data
        if chunk > 1:
            self._run_chunked(dec, bundle, feed, counter, on_frame, chunk)
        else:
            for i, r in zip(feed.tolist(), counter.rank.tolist()):
                pkt = self.nvc.PacketData()
                pkt.bsl_data = base + int(bundle.offsets[i])
                pkt.bsl = int(bundle.sizes[i])
                pkt.pts = r
                pkt.decode_flag = self.packet_flags
                counter.take(self._decode(dec, pkt), on_frame)
        eos = self.nvc.PacketData()
        eos.bsl, eos.bsl_data = 0, 0
        counter.take(self._decode(dec, eos), on_frame)
        dec.flushed = True
        del payload
        counter.check(len(feed))

    def _run_chunked(self, dec: _Decoder, bundle: PacketBundle, feed: np.ndarray,
                     counter: _FrameCounter, on_frame: OnFrame, chunk: int) -> None:
        """Feed ``feed`` in runs of up to ``chunk`` access units per ``Decode`` call, without
        the end-of-picture flag (the parser finds the boundaries); frames map by count."""
        for a in range(0, len(feed), chunk):
            buf = gather_packets(bundle, feed[a : a + chunk])
            pkt = self.nvc.PacketData()
            pkt.bsl_data = buf.ctypes.data
            pkt.bsl = int(buf.nbytes)
            pkt.pts = int(counter.rank[a])
            pkt.decode_flag = self.packet_flags & ~ENDOFPICTURE
            counter.take(self._decode(dec, pkt), on_frame)
            del buf  # the parser has consumed it when Decode returns

    def _decode(self, dec: _Decoder, pkt) -> list:
        if self._frames_out and SYNC_BEFORE_RECYCLE:
            self.stream.synchronize()  # reads of the frames this call recycles are done
        try:
            frames = dec.handle.Decode(pkt)
        except Exception as exc:
            if is_gpu_out_of_memory(exc):  # surfaces allocated as the stream starts: no retry
                raise gpu_memory_error(exc, f"NVDEC decode surfaces ({dec.codec}, "
                                       f"{dec.max_w}x{dec.max_h})", self.gpu) from exc
            raise _DecodeFailure() from exc
        self._frames_out = bool(frames)
        return frames

    def close(self) -> None:
        self._decoders.clear()


def gather_packets(bundle: PacketBundle, positions: np.ndarray) -> np.ndarray:
    """The payload bytes of packets ``positions`` (ascending), back to back: a view when they
    are contiguous in the bundle, else one copy."""
    offsets, sizes = bundle.offsets[positions], bundle.sizes[positions]
    start, stop = int(offsets[0]), int(offsets[-1] + sizes[-1])
    if stop - start == int(sizes.sum()):
        return bundle.payload[start:stop]
    return np.concatenate([bundle.payload[int(o) : int(o) + int(n)] for o, n in zip(offsets, sizes)])


def _key(record: VideoRecord) -> tuple[str, bool]:
    """Decoders are per codec and surface format: NV12 (8-bit) or P016 (deeper)."""
    return record.codec, record.bit_depth > 8


#: What a suspect GOP's error says to do (once its verdict is its own).
_FIX = (". None of its frames is delivered. With fallback='cpu' (the default) the loader "
        "decodes it again on the CPU, whose error detection decides; with on_error='skip' its "
        "samples are skipped. A damaged file: re-encode it or drop it from the index")


class SuspectGopError(CorruptVideoError):
    """NVDEC reported a (concealed) decode error while a GOP was decoded: its frames are not
    delivered. ``alone``: it was decoded while no other GOP was, so the error is its own."""

    def __init__(self, path: str, message: str, *, alone: bool = True) -> None:
        super().__init__(path, message)
        self.alone = alone

    def __reduce__(self):
        return (type(self), (self.path, str(self).split(": ", 1)[-1]), {"alone": self.alone})


class _DecodeFailure(Exception):
    """The binding's ``Decode`` raised (the cause is chained); not a sink error."""


class _FrameCounter:
    """Maps each output frame to its display index (see the module docstring).

    Packet ``feed[j]`` is sent with ``pts = rank[j]``, its 1-based rank in display order;
    ``display[r - 1]`` is the display index of the frame of rank ``r`` (-1: not a frame).
    """

    def __init__(self, slot: DecoderSlot, record: VideoRecord, feed: np.ndarray, bundle: PacketBundle,
                 *, wants: Wants | None = None, by_count: bool = False) -> None:
        self.slot, self.record = slot, record
        self.wants, self.by_count = wants, by_count
        pts = bundle.pts[feed]
        order = np.argsort(pts, kind="stable")
        self.rank = np.empty(len(feed), np.int64)
        self.rank[order] = np.arange(1, len(feed) + 1)
        self.display = _display_indices(record, pts[order])
        self.count = 0

    def take(self, frames, on_frame: OnFrame) -> None:
        rec, viewed = self.record, False
        for frame in frames:
            r = self._rank(frame)
            if not 1 <= r <= len(self.display):
                raise CorruptVideoError(rec.path, f"NVDEC output a frame of unknown rank {r} (fed {len(self.display)} packets)")
            self.count += 1
            i = int(self.display[r - 1])
            if self.wants is not None and not self.wants(i):
                continue  # no view: DLPack export and the callback cost host time per frame
            viewed = True
            on_frame(i, nv12_view(frame, rec.height, rec.width, self.slot.device, deep=rec.bit_depth > 8,
                                  path=rec.path))
        # Only frames that were read need the stream drained before their surfaces recycle.
        self.slot._frames_out = viewed

    def _rank(self, frame) -> int:
        slot = self.slot
        if self.by_count:
            return self.count + 1
        if slot.pts_mode is None:
            slot.pts_mode = "frame" if int(frame.getPTS()) == 1 else "count"
            log.info("NVDEC frame order: matched by %s", slot.pts_mode)
        return int(frame.getPTS()) if slot.pts_mode == "frame" else self.count + 1

    def check(self, fed: int) -> None:
        if (self.by_count or self.slot.pts_mode == "count") and self.count not in (0, fed):
            raise CorruptVideoError(
                self.record.path, f"NVDEC output {self.count} frames for {fed} packets; frames "
                "cannot be numbered (damaged GOP?)",
            )


def _packets_to_feed(record: VideoRecord, bundle: PacketBundle, g: int, wanted: np.ndarray, *,
                     skip_nonref: bool) -> np.ndarray:
    """Positions of GOP ``g``'s packets that the display frames ``wanted`` need, in decode
    order: every packet up to the last one needed, less (with ``skip_nonref``) the unwanted
    non-reference pictures."""
    r = bundle.packet_range(g)
    key, last = int(bundle.gop_keyframes[g]), int(wanted[-1])
    if last > int(bundle.gop_last[g]):
        raise CorruptVideoError(record.path, f"packet bundle covers frames up to {int(bundle.gop_last[g])}, not {last}")
    pts = bundle.pts[r.start : r.stop]
    hits = np.flatnonzero(np.isin(pts, record.pts[key : last + 1]))
    if len(hits) != last - key + 1:
        raise CorruptVideoError(record.path, f"packet bundle lacks packets for frames {key}..{last}")
    stop = int(hits[-1]) + 1
    if not skip_nonref:
        return np.arange(r.start, r.start + stop)
    drop = (bundle.is_nonref[r.start : r.start + stop] != 0) & ~np.isin(pts[:stop], record.pts[wanted])
    return r.start + np.flatnonzero(~drop)


def _gop_end(record: VideoRecord, key: int) -> int:
    """The last display index of the GOP whose keyframe is ``key``."""
    k = int(np.searchsorted(record.keyframes, key, side="right"))
    return int(record.keyframes[k]) - 1 if k < len(record.keyframes) else record.num_frames - 1


def _display_indices(record: VideoRecord, sorted_pts: np.ndarray) -> np.ndarray:
    """Display index of each pts (-1 for pts that are no frame of the record)."""
    pos = np.searchsorted(record.pts, sorted_pts)
    pos = np.minimum(pos, record.num_frames - 1)
    return np.where(record.pts[pos] == sorted_pts, pos, -1)
