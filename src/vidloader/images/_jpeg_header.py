"""What a JPEG's header segments say about how it must be decoded, read in Python without
decoding: enough to choose the files nvJPEG's hardware decoder may take whole and as stored
(:func:`hardware_decodes`), the rest going to a decoder that handles every case."""

from __future__ import annotations

import typing

import numpy as np

#: Start-of-frame markers (``SOF0``-``SOF15`` but ``DHT``, ``JPG`` and ``DAC``).
_SOF_MARKERS = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
_SOS, _EOI, _APP1, _APP14 = 0xDA, 0xD9, 0xE1, 0xEE
#: Markers that stand alone, without a length (``TEM``, ``RST0``-``RST7``).
_STANDALONE = frozenset([0x01, *range(0xD0, 0xD8)])


class JpegHeader(typing.NamedTuple):
    """A JPEG's frame header and the segments before its first scan."""

    frame: int  # the start-of-frame marker: 0xC0 baseline, 0xC2 progressive, ...
    precision: int  # bits a sample
    height: int  # stored, before any EXIF orientation
    width: int
    component_ids: tuple[int, ...]
    sampling: tuple[tuple[int, int], ...]  # (horizontal, vertical) a component
    orientation_tags: bool  # an APP1 segment (EXIF or XMP) that may carry an orientation
    adobe_rgb: bool  # an Adobe APP14 segment saying the samples are RGB, not YCbCr
    scan_components: int  # components in the first scan (0: no scan header read)


def jpeg_header(data) -> JpegHeader | None:
    """The header of a JPEG (bytes, or a uint8 array of them), read segment by segment from
    its start to its first scan; ``None`` where it is not a JPEG, or the header is cut short
    or malformed before its frame header."""
    view = data if isinstance(data, bytes) else memoryview(np.ascontiguousarray(data)).cast("B")
    if len(view) < 4 or view[0] != 0xFF or view[1] != 0xD8:
        return None
    tags, adobe_rgb, frame, scan = False, False, None, 0
    for marker, body in _segments(view):
        if body is None:  # malformed
            return None
        if marker == _SOS:
            scan = body[0] if len(body) else 0
        elif marker in _SOF_MARKERS and frame is None:
            frame = _frame(marker, body)
            if frame is None:
                return None
        elif marker == _APP1:
            tags = True  # EXIF or XMP: either may hold an orientation Pillow applies
        elif marker == _APP14 and len(body) >= 12 and bytes(body[:5]) == b"Adobe":
            adobe_rgb = body[11] == 0  # transform 0: no colour transform (RGB or CMYK)
    if frame is None:
        return None
    return frame._replace(orientation_tags=tags, adobe_rgb=adobe_rgb, scan_components=scan)


def _segments(view):
    """``(marker, body)`` of each segment after the start-of-image marker, up to and with the
    first scan's header, or to the end of the data; ``body`` is ``None`` for a malformed
    segment (the last)."""
    at, size = 2, len(view)
    while at + 2 <= size:
        if view[at] != 0xFF:
            yield None, None
            return
        marker = view[at + 1]
        if marker == 0xFF or marker in _STANDALONE:  # a fill byte; a marker without length
            at += 1 if marker == 0xFF else 2
            continue
        if marker == _EOI or at + 4 > size:
            return
        length = (view[at + 2] << 8) | view[at + 3]
        if length < 2:
            yield marker, None
            return
        yield marker, view[at + 4:min(at + 2 + length, size)]
        if marker == _SOS:  # entropy-coded data follows
            return
        at += 2 + length


def _frame(marker: int, body) -> JpegHeader | None:
    if len(body) < 6:
        return None
    count = body[5]
    if len(body) < 6 + 3 * count:
        return None
    ids = tuple(body[6 + 3 * k] for k in range(count))
    sampling = tuple((body[7 + 3 * k] >> 4, body[7 + 3 * k] & 15) for k in range(count))
    return JpegHeader(marker, body[0], (body[1] << 8) | body[2], (body[3] << 8) | body[4], ids,
                      sampling, False, False, 0)


#: Chroma subsamplings given to the hardware decoder, as the luma component's sampling factors
#: with both chroma components at (1, 1): 4:4:4, 4:2:2, 4:2:0, 4:4:0, the set nvImageCodec's
#: hardware decoder takes (4:1:1 and 4:1:0, which it reports unsupported, go elsewhere).
_HARDWARE_LUMA = frozenset([(1, 1), (2, 1), (2, 2), (1, 2)])
_RGB_IDS = (ord("R"), ord("G"), ord("B"))


def hardware_decodes(header: JpegHeader | None, place: tuple[int, int], *,
                     upright: bool = False) -> bool:
    """Whether a file of this header goes to the hardware decoder, into a place of ``(height,
    width)``: a baseline (SOF0), 8-bit, three-component JPEG whose first scan holds all three
    (interleaved), of a subsampling the hardware takes, whose stored size is the place's,
    without an Adobe segment saying "no colour transform" or R/G/B component ids (files
    libjpeg may decode as RGB; a few it decodes as YCbCr go elsewhere too, which costs only
    speed), and either known to be ``upright`` as stored (the index's orientation) or without
    an APP1 segment (EXIF or XMP) that could turn it. Gray JPEGs go elsewhere as well."""
    return (header is not None and header.frame == 0xC0 and header.precision == 8
            and len(header.sampling) == 3 and header.scan_components == 3 and not header.adobe_rgb
            and header.component_ids != _RGB_IDS
            and header.sampling[0] in _HARDWARE_LUMA and header.sampling[1:] == ((1, 1), (1, 1))
            and (upright or not header.orientation_tags)
            and (header.height, header.width) == tuple(place))
