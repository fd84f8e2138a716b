"""Structure-aware damage to MP4 files, for the fuzz test (``test_fuzz.py``).

Four kinds, as issue 17 lists them: bit flips anywhere, truncation, a box's size field
overwritten (any box of the ``moov`` tree, or ``mdat``), and damage to one H.264/HEVC NAL
unit inside ``mdat`` (its 4-byte length prefix, its header, or a run of its payload). The
parsers only find where things are; they never need the file to be valid.
"""

from __future__ import annotations

import struct

#: Boxes whose payload is more boxes (the ones the sample tables live under).
_CONTAINERS = {b"moov", b"trak", b"mdia", b"minf", b"stbl", b"edts", b"dinf", b"udta"}


def boxes(data: bytes, start: int = 0, end: int | None = None) -> list[tuple[int, int, bytes]]:
    """``(offset, size, type)`` of every box, depth first, from the container tree."""
    end = len(data) if end is None else end
    out, at = [], start
    while at + 8 <= end:
        size, kind = struct.unpack(">I4s", data[at:at + 8])
        if size < 8 or at + size > end:
            break
        out.append((at, size, kind))
        if kind in _CONTAINERS:
            out += boxes(data, at + 8, at + size)
        at += size
    return out


def nal_units(data: bytes) -> list[tuple[int, int]]:
    """``(offset of the length prefix, NAL size)`` of the length-prefixed NAL units in
    ``mdat`` (a file of one video track: ``mdat`` holds nothing else)."""
    mdat = [(o, s) for o, s, k in boxes(data) if k == b"mdat"]
    if not mdat:
        return []
    at, end = mdat[0][0] + 8, sum(mdat[0])
    out = []
    while at + 4 <= end:
        size = int.from_bytes(data[at:at + 4], "big")
        if size == 0 or at + 4 + size > end:
            break
        out.append((at, size))
        at += 4 + size
    return out


def flip_bits(data: bytes, positions: list[int]) -> bytes:
    """Flip bit ``p % 8`` of byte ``p // 8`` for each ``p`` (wrapped into the file)."""
    out = bytearray(data)
    for p in positions:
        p %= 8 * len(out)
        out[p // 8] ^= 1 << (p % 8)
    return bytes(out)


def truncate(data: bytes, fraction: float) -> bytes:
    return data[: int(len(data) * fraction)]


def set_box_size(data: bytes, which: int, size: int) -> bytes:
    """Overwrite the size field of box ``which`` (wrapped) with ``size`` (a uint32)."""
    found = boxes(data)
    at = found[which % len(found)][0]
    return data[:at] + struct.pack(">I", size % 2**32) + data[at + 4:]


def damage_nal(data: bytes, which: int, part: str, value: bytes) -> bytes:
    """Overwrite part of NAL unit ``which`` (wrapped): its ``"length"`` prefix, its
    ``"header"`` (first byte) or the start of its ``"payload"`` with ``value``."""
    units = nal_units(data)
    if not units:
        return data
    at, size = units[which % len(units)]
    start = {"length": at, "header": at + 4, "payload": at + 5}[part]
    room = {"length": 4, "header": 1, "payload": max(size - 1, 0)}[part]
    value = value[:room]
    return data[:start] + value + data[start + len(value):]
