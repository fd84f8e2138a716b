""":class:`PacketBundle`: the compressed packets of some GOPs of one video, in one buffer.

A bundle is what separation mode moves from a CPU demux worker to the GPU decoding process:
one contiguous ``uint8`` payload plus a handful of ``int64`` arrays, so it pickles as a few
large buffers and can be laid out flat in shared memory (:meth:`PacketBundle.write_to`,
:meth:`PacketBundle.read_from`). This module is numpy-only: it runs in any process.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Sequence
from typing import Protocol

import numpy as np

_MAGIC = b"VLPB"
_VERSION = 2
# magic, version, n_packets, n_gops, payload bytes, path bytes, codec bytes
_HEADER = struct.Struct("<4sIqqqqq")


@dataclasses.dataclass(frozen=True, eq=False)
class PacketBundle:
    """Annex B packets of one or more GOPs of one video, in decode order, GOP by GOP.

    Packets of GOP ``g`` are contiguous (``gop_id == g``) and start with the GOP's keyframe,
    which carries its parameter sets in-band, so each GOP decodes on its own. Decoding the
    packets of GOP ``g`` and flushing outputs every frame of display indices
    ``gop_keyframes[g] .. gop_last[g]`` (and possibly a few later ones).

    Attributes:
        path (str): the video file.
        codec (str): FFmpeg codec name (``"h264"`` or ``"hevc"``).
        payload (np.ndarray): uint8, every packet's bytes back to back.
        offsets (np.ndarray): int64 start of each packet in ``payload``.
        sizes (np.ndarray): int64 byte size of each packet.
        pts (np.ndarray): int64 presentation timestamp of each packet (``record.time_base``).
        is_key (np.ndarray): int64 1 where the packet is a keyframe, else 0.
        is_nonref (np.ndarray): int64 1 where the packet is a non-reference picture (no other
            picture predicts from it: H.264 ``nal_ref_idc == 0``, HEVC sub-layer non-reference
            at the bundle's highest temporal id; see :mod:`vidloader.decoding.nvdec._nal`), else 0.
            Such a packet may be left out of the decoder's input when its own frame is not
            wanted; every other frame still decodes identically.
        gop_id (np.ndarray): int64 position of each packet's GOP in ``gop_keyframes``.
        gop_keyframes (np.ndarray): int64 display index of each GOP's keyframe.
        gop_last (np.ndarray): int64 last display index each GOP's packets make decodable.
    """

    path: str
    codec: str
    payload: np.ndarray
    offsets: np.ndarray
    sizes: np.ndarray
    pts: np.ndarray
    is_key: np.ndarray
    is_nonref: np.ndarray
    gop_id: np.ndarray
    gop_keyframes: np.ndarray
    gop_last: np.ndarray

    @property
    def num_packets(self) -> int:
        return len(self.offsets)

    @property
    def num_gops(self) -> int:
        return len(self.gop_keyframes)

    @property
    def nbytes(self) -> int:
        """Bytes held: payload plus the per-packet and per-GOP arrays."""
        arrays = (self.offsets, self.sizes, self.pts, self.is_key, self.is_nonref, self.gop_id)
        return int(self.payload.nbytes + sum(a.nbytes for a in arrays)
                   + self.gop_keyframes.nbytes + self.gop_last.nbytes)

    def packet_range(self, g: int) -> range:
        """Positions of the packets of GOP ``g`` (they are contiguous)."""
        lo, hi = np.searchsorted(self.gop_id, [g, g + 1])
        return range(int(lo), int(hi))

    def packet(self, i: int) -> np.ndarray:
        """The bytes of packet ``i`` (a view into ``payload``)."""
        off = int(self.offsets[i])
        return self.payload[off : off + int(self.sizes[i])]

    def gop(self, g: int) -> PacketBundle:
        """A bundle holding only GOP ``g`` (its own compact copy of the payload)."""
        r = self.packet_range(g)
        sl = slice(r.start, r.stop)
        start = int(self.offsets[r.start]) if len(r) else 0
        stop = int(self.offsets[r.stop - 1] + self.sizes[r.stop - 1]) if len(r) else 0
        return PacketBundle(
            self.path, self.codec,
            payload=self.payload[start:stop].copy(),
            offsets=self.offsets[sl] - start,
            sizes=self.sizes[sl].copy(),
            pts=self.pts[sl].copy(),
            is_key=self.is_key[sl].copy(),
            is_nonref=self.is_nonref[sl].copy(),
            gop_id=np.zeros(len(r), np.int64),
            gop_keyframes=self.gop_keyframes[g : g + 1].copy(),
            gop_last=self.gop_last[g : g + 1].copy(),
        )

    def gops_from(self, g: int) -> PacketBundle:
        """A bundle holding GOPs ``g`` onwards, renumbered from 0 (views into this one's
        arrays: it lives no longer than this bundle is used). What a task restricted to its
        GOPs after a damaged one decodes (``BatchAssembler._decode_past_damage``)."""
        first = int(np.searchsorted(self.gop_id, g))
        start = int(self.offsets[first]) if first < self.num_packets else self.payload.nbytes
        return PacketBundle(
            self.path, self.codec,
            payload=self.payload[start:],
            offsets=self.offsets[first:] - start,
            sizes=self.sizes[first:],
            pts=self.pts[first:],
            is_key=self.is_key[first:],
            is_nonref=self.is_nonref[first:],
            gop_id=self.gop_id[first:] - g,
            gop_keyframes=self.gop_keyframes[g:],
            gop_last=self.gop_last[g:],
        )

    # --- flat layout for shared memory -------------------------------------------------------

    def _strings(self) -> tuple[bytes, bytes]:
        return self.path.encode(), self.codec.encode()

    def serialized_size(self) -> int:
        """Bytes :meth:`write_to` needs."""
        path, codec = self._strings()
        n, g = self.num_packets, self.num_gops
        return _HEADER.size + 8 * (6 * n + 2 * g) + len(path) + len(codec) + self.payload.nbytes

    def write_to(self, buffer) -> int:
        """Write the bundle into a writable buffer (e.g. ``SharedMemory.buf``); return bytes used."""
        path, codec = self._strings()
        n, g = self.num_packets, self.num_gops
        mv = memoryview(buffer).cast("B")
        size = self.serialized_size()
        if len(mv) < size:
            raise ValueError(f"buffer of {len(mv)} bytes is too small for the bundle ({size})")
        _HEADER.pack_into(mv, 0, _MAGIC, _VERSION, n, g, self.payload.nbytes, len(path), len(codec))
        pos = _HEADER.size
        for arr in (self.offsets, self.sizes, self.pts, self.is_key, self.is_nonref, self.gop_id,
                    self.gop_keyframes, self.gop_last):
            raw = np.ascontiguousarray(arr, np.int64).view(np.uint8)
            mv[pos : pos + raw.nbytes] = raw
            pos += raw.nbytes
        for raw in (path, codec):
            mv[pos : pos + len(raw)] = raw
            pos += len(raw)
        mv[pos : pos + self.payload.nbytes] = np.ascontiguousarray(self.payload).view(np.uint8)
        return size

    @classmethod
    def read_from(cls, buffer, *, copy: bool = False) -> PacketBundle:
        """Rebuild a bundle written by :meth:`write_to`; arrays are views unless ``copy``."""
        mv = memoryview(buffer).cast("B")
        magic, version, n, g, nbytes, lpath, lcodec = _HEADER.unpack_from(mv, 0)
        if magic != _MAGIC or version != _VERSION:
            raise ValueError("not a vidloader packet bundle (bad magic or version)")
        pos = _HEADER.size
        arrays = []
        for count in (n, n, n, n, n, n, g, g):
            a = np.frombuffer(mv, np.int64, count, pos)
            arrays.append(a.copy() if copy else a)
            pos += 8 * count
        path = bytes(mv[pos : pos + lpath]).decode()
        codec = bytes(mv[pos + lpath : pos + lpath + lcodec]).decode()
        pos += lpath + lcodec
        payload = np.frombuffer(mv, np.uint8, nbytes, pos)
        return cls(path, codec, payload.copy() if copy else payload, *arrays)


class PayloadSink(Protocol):
    """Where :func:`~._annexb.demux_gops` writes packet bytes instead of a new array: an
    append-only buffer (a demux worker's shared-memory segment,
    :class:`vidloader.pipeline._payloads.SharedPayloads`)."""

    def tell(self) -> int:
        """Bytes written so far (where the next write goes)."""

    def write(self, data: memoryview) -> None:
        """Append ``data``."""

    def truncate(self, size: int) -> None:
        """Forget everything written after the first ``size`` bytes."""

    def view(self, start: int, stop: int) -> np.ndarray:
        """uint8 view of bytes ``start:stop`` (valid while the sink lives)."""


def concat_bundles(bundles: Sequence[PacketBundle], payload: np.ndarray | None = None
                   ) -> PacketBundle:
    """Join bundles of the same video into one (GOP ids renumbered in order). ``payload``:
    their payloads already back to back (views of one sink, written in this order), used
    instead of a joined copy."""
    if not bundles:
        raise ValueError("concat_bundles needs at least one bundle")
    first = bundles[0]
    if any(b.path != first.path for b in bundles):
        raise ValueError("concat_bundles joins bundles of one video only")
    payload_starts = np.cumsum([0] + [b.payload.nbytes for b in bundles[:-1]])
    gop_starts = np.cumsum([0] + [b.num_gops for b in bundles[:-1]])
    return PacketBundle(
        first.path, first.codec,
        payload=np.concatenate([b.payload for b in bundles]) if payload is None else payload,
        offsets=np.concatenate([b.offsets + s for b, s in zip(bundles, payload_starts)]),
        sizes=np.concatenate([b.sizes for b in bundles]),
        pts=np.concatenate([b.pts for b in bundles]),
        is_key=np.concatenate([b.is_key for b in bundles]),
        is_nonref=np.concatenate([b.is_nonref for b in bundles]),
        gop_id=np.concatenate([b.gop_id + s for b, s in zip(bundles, gop_starts)]),
        gop_keyframes=np.concatenate([b.gop_keyframes for b in bundles]),
        gop_last=np.concatenate([b.gop_last for b in bundles]),
    )
