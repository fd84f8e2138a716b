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
    frames: int = 1  # start-of-frame segments before the first scan (the fields: the first's)


def jpeg_header(data) -> JpegHeader | None:  # noqa: C901 - one loop on purpose (docstring)
    """The header of a JPEG (bytes, or a uint8 array of them), read segment by segment from
    its start to its first scan; ``None`` where it is not a JPEG, or the header is cut short
    or malformed before its frame header.

    One loop over the segments' markers and lengths, no body sliced but the frame header's
    component bytes, one tuple built at the end: it runs on every file of every batch a
    decode lane gives nvJPEG, under the GIL the lanes share (5.1 µs a 500×375 file on the CPU
    machine; a generator of segment bodies and ``_replace`` took 8.1)."""
    view = data if isinstance(data, bytes) else memoryview(np.ascontiguousarray(data)).cast("B")
    size = len(view)
    if size < 4 or view[0] != 0xFF or view[1] != 0xD8:
        return None
    tags, adobe_rgb, frame, scan, frames = False, False, None, 0, 0
    at = 2
    while at + 2 <= size:
        if view[at] != 0xFF:  # malformed: a segment must start with a marker
            return None
        marker = view[at + 1]
        if marker == 0xFF:  # a fill byte
            at += 1
            continue
        if marker in _STANDALONE:  # a marker without a length
            at += 2
            continue
        if marker == _EOI or at + 4 > size:
            break
        length = (view[at + 2] << 8) | view[at + 3]
        if length < 2:  # malformed
            return None
        body, end = at + 4, min(at + 2 + length, size)
        if marker == _SOS:  # the first scan's header; entropy-coded data follows
            scan = view[body] if end > body else 0
            break
        if marker in _SOF_MARKERS:
            frames += 1
            if frame is None:
                frame = _frame(marker, view, body, end)
                if frame is None:
                    return None
        elif marker == _APP1:
            tags = True  # EXIF or XMP: either may hold an orientation Pillow applies
        elif marker == _APP14 and end - body >= 12 and bytes(view[body:body + 5]) == b"Adobe":
            adobe_rgb = view[body + 11] == 0  # transform 0: no colour transform (RGB or CMYK)
        at += 2 + length
    if frame is None:
        return None
    return JpegHeader(*frame, tags, adobe_rgb, scan, frames)


def _frame(marker: int, view, body: int, end: int) -> tuple | None:
    """The frame header's fields (``JpegHeader``'s first six) from ``view[body:end]``."""
    if end - body < 6:
        return None
    count = view[body + 5]
    if end - body < 6 + 3 * count:
        return None
    first = body + 6
    ids = tuple(view[first:first + 3 * count:3])
    sampling = tuple((x >> 4, x & 15) for x in view[first + 1:first + 3 * count:3])
    return (marker, view[body], (view[body + 1] << 8) | view[body + 2],
            (view[body + 3] << 8) | view[body + 4], ids, sampling)


#: Chroma subsamplings given to the hardware decoder, as the luma component's sampling factors
#: with both chroma components at (1, 1): 4:4:4, 4:2:2, 4:2:0, 4:4:0, the set nvImageCodec's
#: hardware decoder takes (4:1:1 and 4:1:0, which it reports unsupported, go elsewhere).
_HARDWARE_LUMA = frozenset([(1, 1), (2, 1), (2, 2), (1, 2)])
_RGB_IDS = (ord("R"), ord("G"), ord("B"))


def hardware_format(header: JpegHeader | None) -> bool:
    """The part of :func:`hardware_decodes` that depends on the file alone: a baseline (SOF0),
    8-bit, three-component JPEG whose first scan holds all three, of a subsampling the
    hardware takes, not RGB-coded, with one frame header (of several, which one another
    parser takes is not known here: the size check could pass for one and the decode
    write the other)."""
    return (header is not None and header.frame == 0xC0 and header.precision == 8
            and header.frames == 1
            and len(header.sampling) == 3 and header.scan_components == 3 and not header.adobe_rgb
            and header.component_ids != _RGB_IDS
            and header.sampling[0] in _HARDWARE_LUMA and header.sampling[1:] == ((1, 1), (1, 1)))


#: Columns of :func:`header_facts`' rows.
FACT_FORMAT, FACT_TAGS, FACT_HEIGHT, FACT_WIDTH = range(4)
#: A row of :func:`header_facts` for a file whose header was not read.
UNKNOWN_FACTS = (-1, -1, -1, -1)


def header_facts(data) -> tuple[int, int, int, int]:
    """What :func:`hardware_decodes` needs of a file, as four ints: its :func:`hardware_format`
    (1 or 0), whether it has an APP1 segment (1 or 0), its stored height and width (0 where
    it is not a JPEG). Made where the file is read (the reader processes, with GILs of their
    own), so the decode lanes only compare them with the index (:func:`hardware_rows`)."""
    header = jpeg_header(data)
    if header is None:
        return 0, 0, 0, 0
    return int(hardware_format(header)), int(header.orientation_tags), header.height, header.width


def hardware_rows(facts: np.ndarray, heights: np.ndarray, widths: np.ndarray, *,
                  upright: bool) -> np.ndarray:
    """bool ``[B]``: :func:`hardware_decodes` of each row from its :func:`header_facts`
    (int ``[B, 4]``) and its place's size; ``False`` for :data:`UNKNOWN_FACTS` rows."""
    facts = np.asarray(facts, np.int64)
    if facts.shape != (len(heights), 4):
        raise ValueError(f"facts is {facts.shape}; ({len(heights)}, 4) is needed (a row an image)")
    tagged = facts[:, FACT_TAGS] != 0
    return ((facts[:, FACT_FORMAT] == 1) & (upright | ~tagged)
            & (facts[:, FACT_HEIGHT] == heights) & (facts[:, FACT_WIDTH] == widths))


def hardware_decodes(header: JpegHeader | None, place: tuple[int, int], *,
                     upright: bool = False) -> bool:
    """Whether a file of this header goes to the hardware decoder, into a place of ``(height,
    width)``: a baseline (SOF0), 8-bit, three-component JPEG whose first scan holds all three
    (interleaved), of a subsampling the hardware takes, whose stored size is the place's,
    without an Adobe segment saying "no colour transform" or R/G/B component ids (files
    libjpeg may decode as RGB; a few it decodes as YCbCr go elsewhere too, which costs only
    speed), and either known to be ``upright`` as stored (the index's orientation) or without
    an APP1 segment (EXIF or XMP) that could turn it. Gray JPEGs go elsewhere as well."""
    return (hardware_format(header) and (upright or not header.orientation_tags)
            and (header.height, header.width) == tuple(place))
