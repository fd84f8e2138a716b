"""Whether a JPEG ends with its end-of-image marker, told from the file's two ends.

nvJPEG decodes a truncated JPEG into a whole image, the missing rows made up (seen on the
H100, ``session20-1``), where Pillow refuses it. So the GPU decoder sends such files to Pillow
(``_nvimgcodec.NvImageCodecDecoder``). ``ImageFolder`` records the answer for every file when
it indexes them (``cut_short``), so the decode itself need not read each file's ends (an
``open`` and two reads, each a release and retake of the GIL the augmentation needs).
Torch-free: the indexing processes import it.
"""

from __future__ import annotations

import os

#: JPEG's start-of-image and end-of-image markers.
JPEG_SOI, JPEG_EOI = b"\xff\xd8", b"\xff\xd9"
#: Bytes of a file's end searched for the end-of-image marker (after padding bytes).
TAIL_BYTES = 32


def jpeg_cut_short(head: bytes, tail: bytes) -> bool:
    """Whether a file that begins with ``head`` and ends with ``tail`` is a JPEG without its
    end-of-image marker at the end: cut short (truncated), or followed by other bytes. Such
    files go to Pillow, which decodes one with trailing bytes and refuses a truncated one, as
    on the CPU path. Not a JPEG (``head``): ``False``."""
    return head[:2] == JPEG_SOI and not tail.rstrip(b"\x00\xff\r\n ").endswith(JPEG_EOI)


def read_file_ends(path: str) -> tuple[bytes, bytes]:
    """The first two and the last :data:`TAIL_BYTES` bytes of a file (``b""`` if unreadable).
    Unbuffered (``os.pread``): 12-18 µs a file on the 2-core machine, against 19-35 µs with
    ``open``'s buffered reads."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return b"", b""
    try:
        size = os.fstat(fd).st_size
        return os.pread(fd, 2, 0), os.pread(fd, TAIL_BYTES, max(0, size - TAIL_BYTES))
    except OSError:
        return b"", b""
    finally:
        os.close(fd)


def file_cut_short(path: str) -> bool:
    """:func:`jpeg_cut_short` of the file at ``path`` (``False`` if it cannot be read)."""
    return jpeg_cut_short(*read_file_ends(path))
