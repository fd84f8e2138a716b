"""A CPU stand-in for PyNvVideoCodec and ``torch.cuda``, to test the NVDEC executor's logic.

The fake decoder parses the hand-built ``PacketData`` exactly as NVDEC would (raw pointer +
size of the packet bytes, flush on an empty packet) and decodes with FFmpeg: H.264, HEVC, VP9
and AV1 (libdav1d), handing out NV12 surfaces for 8-bit video and P016 (uint16, samples in the
high bits) for 10/12-bit video, as NVDEC does. ``GetDecoderCaps`` answers per codec, chroma
format and bit depth like an H200 (AV1 included). It is deliberately
hostile where the real one may be: every ``Decode`` call scribbles over the surfaces it
returned before (surface recycling), surfaces are pitched (rows wider than the picture), and
``getPTS`` can be made to return 0 (no timestamp pass-through) or a flushed decoder made to
ignore new packets. It conceals damage as NVDEC does (:attr:`FakeNvc.conceal`): a GOP fed a
packet named there comes out wrong from that packet on, with no exception, and the line
PyNvVideoCodec prints (``Decode Error occurred for picture N``) goes to C's ``stdout`` through
``printf``, when the GOP is flushed. What it cannot check (CUDA streams, real NVDEC output)
the ``cuda`` tests do.
"""

from __future__ import annotations

import contextlib
import ctypes
import types

import numpy as np
import torch

from vidloader.decoding.cpu._frame import CpuFrame
from vidloader.processing._nv12 import i420_to_nv12, to_p016

#: What PyNvVideoCodec says when NVDEC has no GPU memory for a decoder: its ``NVDEC_API_CALL``
#: text (``CUresult`` 2 is ``CUDA_ERROR_OUT_OF_MEMORY``), raised from ``CreateDecoder`` or from
#: the ``Decode`` whose sequence header makes it create the decoder's surfaces.
OOM_TEXT = ("HandleVideoSequence : cuvidCreateDecoder(&m_hDecoder, &videoDecodeCreateInfo) "
            "returned error 2 at /src/NvDecoder.cpp:318")

#: What PyNvVideoCodec 2.2.4 prints (C ``printf``) for a picture whose decode status is an
#: error or a concealed error.
DECODE_ERROR_FORMAT = b"Decode Error occurred for picture %d\n"
_LIBC = ctypes.CDLL(None)

#: cudaVideoCodec id -> FFmpeg decoder (FFmpeg's native AV1 decoder needs a hardware device).
_CODECS = {4: "h264", 8: "hevc", 10: "vp9", 11: "libdav1d"}


def surface_of(frame) -> np.ndarray:
    """What NVDEC outputs for a decoded ``av.VideoFrame``: NV12 (uint8) for 8-bit 4:2:0, P016
    (uint16, samples shifted to the high bits) for 10/12-bit."""
    bits = frame.format.components[0].bits
    if bits <= 8:
        return i420_to_nv12(frame.to_ndarray(format="yuv420p"))
    y, u, v = CpuFrame(frame, None, "BILINEAR", 0).planes()
    return to_p016(i420_to_nv12(np.concatenate([y, u.reshape(-1, y.shape[1]), v.reshape(-1, y.shape[1])])), bits)


class PacketData:
    def __init__(self) -> None:
        self.key = self.pts = self.dts = self.pos = self.bsl = self.bsl_data = 0
        self.duration = self.decode_flag = self.stream_index = self.is_video = 0


class _Plane:
    """A plane as ``DecodedFrame.cuda()`` lists them: only its ``__cuda_array_interface__``."""

    def __init__(self, t: torch.Tensor) -> None:
        typestr = {torch.uint8: "|u1", torch.uint16: "<u2", torch.int16: "<i2"}[t.dtype]
        self.__cuda_array_interface__ = {"shape": tuple(t.shape), "typestr": typestr,
                                         "data": (t.data_ptr(), False), "version": 2}


class _Frame:
    def __init__(self, surface: torch.Tensor, pts: int, height: int) -> None:
        self._surface, self._pts, self._height = surface, pts, height

    def getPTS(self) -> int:  # noqa: N802 (PyNvVideoCodec's name)
        return self._pts

    def cuda(self) -> list[_Plane]:
        """The luma and the interleaved chroma plane (the real binding's fallback export)."""
        return [_Plane(self._surface[: self._height]), _Plane(self._surface[self._height :])]

    def __dlpack__(self, stream=None):
        return self._surface.__dlpack__()

    def __dlpack_device__(self):
        return self._surface.__dlpack_device__()


class FakeDecoder:
    """One fake ``PyNvDecoder``; see the module docstring."""

    PITCH_PAD = 64

    def __init__(self, owner: FakeNvc, codec: int, maxwidth: int, maxheight: int) -> None:
        import av

        self.owner, self.codec = owner, _CODECS[codec]
        self.max_w, self.max_h = maxwidth, maxheight
        self.cc = av.CodecContext.create(self.codec, "r")
        self.surfaces: list[torch.Tensor] = []
        self.flushed = False
        self.chunked = False  # a chunk went through the parser since the last flush
        self.reconfigs: list[tuple[int, int]] = []
        self.damaged_at = -1  # the picture number of the damaged packet fed since the flush
        self.pictures = 0  # packets fed, in decode order (what the real binding numbers)

    def setReconfigParams(self, width: int, height: int) -> int:  # noqa: N802
        assert width <= self.max_w and height <= self.max_h, "reconfigured beyond the maximum"
        self.reconfigs.append((width, height))
        return 0

    def Decode(self, pkt: PacketData) -> list[_Frame]:  # noqa: N802
        import av

        for s in self.surfaces:  # recycle: whatever a caller kept is now garbage
            s.fill_(0xA5)
        self.owner.packets.append((pkt.bsl, pkt.decode_flag))
        if self.flushed and self.owner.broken_reuse:
            return []
        if self.owner.fail_decodes > 0:
            self.owner.fail_decodes -= 1
            raise RuntimeError("fake NVDEC failure")
        if self.owner.out_of_memory == "decode":
            raise RuntimeError(OOM_TEXT)
        if pkt.bsl == 0:
            # Pictures of a chunk still in the parser come out first, as NVDEC's parser
            # hands its last picture to the decoder at the end of the stream.
            frames = [f for p in self._parse(None) for f in self.cc.decode(p)] + self.cc.decode(None)
            self.cc = av.CodecContext.create(self.codec, "r")
            self.flushed, self.chunked = True, False
        elif pkt.decode_flag & 8:  # ENDOFPICTURE: the packet is one access unit
            packet = av.Packet(self._fed(ctypes.string_at(pkt.bsl_data, pkt.bsl)))
            packet.pts = pkt.pts
            frames = self.cc.decode(packet)
        else:  # a chunk of access units: split by a parser, as NVDEC's own parser does
            self.owner.chunks += 1
            self.chunked = True
            data = self._fed(ctypes.string_at(pkt.bsl_data, pkt.bsl))
            frames = [f for p in self._parse(data) for f in self.cc.decode(p)]
        out = [self._surface(i, f) for i, f in enumerate(frames)]
        if self.damaged_at >= 0:
            for frame in out:  # concealed: wrong pixels, no exception
                frame._surface.fill_(0x10)
            if pkt.bsl == 0:  # as late as the real one could print it: inside the flush
                _LIBC.printf(DECODE_ERROR_FORMAT, ctypes.c_int(self.damaged_at))
                self.owner.errors_printed += 1
                self.damaged_at = -1
        return out

    def _fed(self, data: bytes) -> bytes:
        """Note ``data`` going in; a packet listed in ``owner.conceal`` damages the GOP."""
        self.pictures += 1
        if self.damaged_at < 0 and any(sig in data for sig in self.owner.conceal):
            self.damaged_at = self.pictures
        return data

    def _parse(self, data: bytes | None) -> list:
        return self.cc.parse(data) if data is not None or self.chunked else []

    def _surface(self, i: int, frame) -> _Frame:
        assert frame.width <= self.max_w and frame.height <= self.max_h
        nv12 = torch.from_numpy(surface_of(frame))
        while len(self.surfaces) <= i:
            self.surfaces.append(torch.empty(0, dtype=torch.uint8))
        surf = torch.zeros(nv12.shape[0], nv12.shape[1] + self.PITCH_PAD, dtype=nv12.dtype)
        surf[:, : nv12.shape[1]] = nv12
        self.surfaces[i] = surf
        view = surf[:, : nv12.shape[1]]  # DLPack carries the pitch in the strides
        return _Frame(view, frame.pts if self.owner.pts_passthrough else 0, frame.height)


class FakeNvc(types.ModuleType):
    """The fake ``PyNvVideoCodec`` module."""

    #: ``GetDecoderCaps`` per (codec id, chroma format id, bit depth): the H.264 and HEVC
    #: sizes are what an H200 returned (driver 580); VP9/AV1 128x128..8192x8192 as NVIDIA's
    #: programming guide gives them; H.264 above 8 bits unsupported. Keys not listed answer
    #: ``supported: 0``.
    CAPS = {
        **{(4, 1, 8): dict(width_min=48, width_max=4096, height_min=16, height_max=4096, mb_num_max=65536)},
        **{(8, c, b): dict(width_min=144, width_max=8192, height_min=144, height_max=8192, mb_num_max=262144)
           for c in (1, 3) for b in (8, 10, 12)},
        **{(10, 1, b): dict(width_min=128, width_max=8192, height_min=128, height_max=8192, mb_num_max=262144)
           for b in (8, 10, 12)},
        **{(11, 1, b): dict(width_min=128, width_max=8192, height_min=128, height_max=8192, mb_num_max=262144)
           for b in (8, 10)},
    }

    def __init__(self, *, pts_passthrough: bool = True, broken_reuse: bool = False,
                 fail_decodes: int = 0) -> None:
        super().__init__("PyNvVideoCodec")
        self.pts_passthrough, self.broken_reuse = pts_passthrough, broken_reuse
        self.fail_decodes = fail_decodes  # the next N Decode calls raise
        #: ``"create"`` / ``"decode"``: every ``CreateDecoder`` / ``Decode`` call raises what
        #: the binding raises when the GPU has no memory for a decoder (:data:`OOM_TEXT`),
        #: until set back to ``""``.
        self.out_of_memory = ""
        self.decoders: list[FakeDecoder] = []
        self.packets: list[tuple[int, int]] = []
        self.chunks = 0  # Decode calls that carried several access units
        #: Annex B packets (:func:`packet_of`) whose GOP is concealed, as NVDEC conceals a
        #: damaged slice: wrong frames from that packet on, and the decode-error line printed.
        self.conceal: list[bytes] = []
        self.errors_printed = 0
        self.PacketData = PacketData
        self.cudaVideoCodec = types.SimpleNamespace(H264=4, HEVC=8, VP9=10, AV1=11)
        self.cudaVideoChromaFormat = types.SimpleNamespace(**{"Monochrome": 0, "420": 1, "422": 2, "444": 3})
        self.caps_calls: list[tuple[int, int, int]] = []
        self.OutputColorType = types.SimpleNamespace(NATIVE=0)
        self.DisplayDecodeLatencyType = types.SimpleNamespace(NATIVE=0)

    def GetDecoderCaps(self, *, gpuid, codec, chromaformat, bitdepth):  # noqa: N802
        self.caps_calls.append((codec, chromaformat, bitdepth))
        caps = self.CAPS.get((codec, chromaformat, bitdepth))
        base = {"codec_id": codec, "chromaformat_id": chromaformat, "bitdepth": bitdepth,
                "num_decoder_engines": 7}
        return {**base, "supported": 1, **caps} if caps else {**base, "supported": 0}

    def CreateDecoder(self, *, gpuid, codec, cudacontext, cudastream, usedevicememory,  # noqa: N802
                      maxwidth, maxheight, outputColorType, latency):
        assert usedevicememory is True and cudastream != 0
        if self.out_of_memory == "create":
            raise RuntimeError(OOM_TEXT)
        dec = FakeDecoder(self, codec, maxwidth, maxheight)
        self.decoders.append(dec)
        return dec


class _Stream:
    cuda_stream = 0xC0FFEE
    syncs = 0  # synchronize() calls, all streams together

    def __init__(self, device=None) -> None:
        pass

    def wait_stream(self, other) -> None:
        pass

    def wait_event(self, event) -> None:
        pass

    def synchronize(self) -> None:
        _Stream.syncs += 1


class _Event:
    def record(self, stream=None) -> None:
        pass


def install(monkeypatch, nvc: FakeNvc) -> None:
    """Make ``torch.cuda`` look present and ``import PyNvVideoCodec`` return ``nvc``."""
    import sys

    monkeypatch.setitem(sys.modules, "PyNvVideoCodec", nvc)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "Stream", _Stream)
    monkeypatch.setattr(torch.cuda, "Event", _Event)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: _Stream())
    monkeypatch.setattr(torch.cuda, "stream", lambda s: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "device", lambda d: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d=None: "Fake H200")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda d=None: (9, 0))


def packet_of(record, frame: int) -> bytes:
    """The Annex B packet (what NVDEC is fed) of display frame ``frame`` of ``record``: put it
    in :attr:`FakeNvc.conceal` to have its GOP concealed."""
    from vidloader.decoding.nvdec._annexb import demux_gops
    from vidloader.planning import plan_tasks_for_frames

    bundle = demux_gops(record, plan_tasks_for_frames(0, record, [frame]).gops)
    (i,) = np.flatnonzero(bundle.pts == record.pts[frame])
    return bundle.packet(int(i)).tobytes()


def as_numpy(t: torch.Tensor) -> np.ndarray:
    return t.cpu().numpy()


def stage_on_cpu(monkeypatch) -> None:
    """Put the loader's "GPU" staging buffers on the CPU: the fake has no device memory."""
    from vidloader.pipeline._config import LoaderConfig

    monkeypatch.setattr(LoaderConfig, "gpu", property(lambda self: torch.device("cpu")))


def install_on_cpu(monkeypatch) -> FakeNvc:
    """A fresh :class:`FakeNvc`, installed (:func:`install`), with the loader's staging on the
    CPU (:func:`stage_on_cpu`): what a loader test on the stand-in NVDEC needs."""
    nvc = FakeNvc()
    install(monkeypatch, nvc)
    stage_on_cpu(monkeypatch)
    return nvc
