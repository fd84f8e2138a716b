"""Codec facts derived from what the probe reads: codec names, display names, chroma format
and the coded picture size.

The index names a video's codec the way FFmpeg names the *codec* (``avcodec_get_name``:
``"h264"``, ``"hevc"``, ``"av1"``, ``"vp9"``), never the decoder library that happened to open
it (``"libdav1d"``, ``"libvpx-vp9"``): indexes written before version 3 stored the decoder name,
which :func:`codec_name` maps back.
"""

from __future__ import annotations

import functools
import re

#: FFmpeg decoder names that differ from their codec's name (decoders of this FFmpeg build
#: and of common others), mapped to the codec name.
_DECODER_TO_CODEC = {
    "libdav1d": "av1", "libaom-av1": "av1", "libaom": "av1", "av1_cuvid": "av1", "av1_qsv": "av1",
    "libvpx-vp9": "vp9", "vp9_cuvid": "vp9", "vp9_qsv": "vp9", "libvpx": "vp8", "libvpx-vp8": "vp8",
    "vp8_cuvid": "vp8", "h264_cuvid": "h264", "h264_qsv": "h264", "libopenh264": "h264",
    "hevc_cuvid": "hevc", "hevc_qsv": "hevc", "mpeg4_cuvid": "mpeg4", "mpeg2_cuvid": "mpeg2video",
    "vc1_cuvid": "vc1", "libopenjpeg": "jpeg2000",
}

#: How people name each codec, for messages.
_DISPLAY_NAMES = {
    "h264": "H.264", "hevc": "HEVC", "av1": "AV1", "vp9": "VP9", "vp8": "VP8",
    "mpeg4": "MPEG-4 Part 2", "mpeg2video": "MPEG-2", "mpeg1video": "MPEG-1", "vc1": "VC-1",
    "wmv3": "WMV 9", "h263": "H.263", "mjpeg": "Motion JPEG", "prores": "ProRes",
    "theora": "Theora", "jpeg2000": "JPEG 2000", "ffv1": "FFV1", "dnxhd": "DNxHD",
    "rawvideo": "raw video", "vvc": "H.266/VVC",
}

#: Block grid each codec codes pictures on (luma samples): the coded size is the display size
#: rounded up to it. H.264/MPEG-2/MPEG-4 code whole 16×16 macroblocks; HEVC codes multiples
#: of its minimum coding block (8 with x265's and most encoders' settings: the SPS may choose
#: 16, 32 or 64, which the index does not read); AV1 and VP9 code multiples of 8.
_CODED_ALIGN = {"h264": 16, "mpeg2video": 16, "mpeg1video": 16, "mpeg4": 16, "h263": 16,
                "vc1": 16, "hevc": 8, "av1": 8, "vp9": 8, "vp8": 16}


def codec_name(name: str) -> str:
    """The codec name for an FFmpeg codec *or decoder* name (``"libdav1d"`` → ``"av1"``)."""
    return _DECODER_TO_CODEC.get(name, name)


def display_name(codec: str) -> str:
    """``"hevc"`` → ``"HEVC"``, ``"libdav1d"`` → ``"AV1"``: the codec as people name it."""
    codec = codec_name(codec)
    return _DISPLAY_NAMES.get(codec, codec.upper() or "unknown codec")


@functools.lru_cache(maxsize=256)
def chroma_format(pix_fmt: str) -> str:
    """Chroma subsampling of a pixel format: ``"420"``, ``"422"``, ``"444"``, ``"440"``,
    ``"411"``, ``"400"`` (luma only), ``"rgb"`` or ``""`` (unknown)."""
    try:
        import av

        fmt = av.VideoFormat(pix_fmt)
    except Exception:  # unknown name, or no PyAV: read it from the name
        m = re.match(r"yuvj?a?(4\d\d)", pix_fmt or "")
        return m.group(1) if m else ("400" if (pix_fmt or "").startswith("gray") else "")
    if fmt.is_rgb:
        return "rgb"
    if len(fmt.components) < 3:
        return "400"
    sub = (fmt.chroma_width(16), fmt.chroma_height(16))
    return {(16, 16): "444", (8, 16): "422", (8, 8): "420", (16, 8): "440", (4, 16): "411"}.get(sub, "")


def coded_size(codec: str, width: int, height: int) -> tuple[int, int]:
    """The picture size the decoder works on: the display size rounded up to the codec's
    block grid (see ``_CODED_ALIGN``; unknown codecs: the display size)."""
    a = _CODED_ALIGN.get(codec_name(codec), 1)
    return -(-int(width) // a) * a, -(-int(height) // a) * a
