"""Which Annex B packets are non-reference pictures, read from their NAL unit headers.

:func:`nonreference_flags` lets the NVDEC path do what FFmpeg's ``skip_frame=NONREF`` does on
the CPU: a packet whose picture no later picture predicts from can be left out of the decoder's
input when no request wants that frame, and every other frame still decodes bit-exactly. The
decision needs only the one- or two-byte NAL unit header after each start code, so it is made
for a whole bundle at once with numpy (no bitstream parsing, no PyAV).

The rule, per packet (one access unit):

* **H.264** (ITU-T H.264 7.4.1): a slice NAL unit (types 1..5) with ``nal_ref_idc == 0``
  belongs to a picture that "is not used for inter prediction" by any other picture, and all
  slices of a picture share their ``nal_ref_idc``. Dropping such a picture leaves the decoded
  picture buffer, the reference marking and ``frame_num`` bookkeeping (``PrevRefFrameNum`` only
  follows reference pictures, so no frame-number gap appears) of every other picture unchanged.
* **HEVC** (ITU-T H.265 3.132, 7.4.2.2): the VCL NAL types ``TRAIL_N, TSA_N, STSA_N, RADL_N,
  RASL_N, RSV_VCL_N10/12/14`` (0, 2, 4, 6, 8, 10, 12, 14) mark *sub-layer* non-reference
  pictures: pictures of the same temporal sub-layer never predict from them, but pictures of
  a higher sub-layer (larger ``nuh_temporal_id``) may. So such a picture is flagged only when
  its ``TemporalId`` is the highest one among all VCL NAL units of the bundle: no picture the
  decoder is given can then reference it. Such pictures also never serve as ``prevTid0Pic``
  for picture order count derivation (8.3.1), so the POCs of the remaining pictures do not
  change. FFmpeg's own ``skip_frame=NONREF`` for HEVC skips every ``*_N`` type whatever its
  temporal id; that agrees with this rule on streams without temporal sub-layers (x265's
  default: every picture has ``TemporalId`` 0) and is less safe on streams with them.

A packet is flagged only if it holds at least one VCL (slice) NAL unit and every one of them is
non-reference by the rule above; anything unexpected keeps the packet (flag 0): packets with no
slice, H.264 SVC/MVC slice extensions (types 20, 21), HEVC slices of a layer other than the base
layer (``nuh_layer_id > 0``), or a payload with no start codes at all.
"""

from __future__ import annotations

import numpy as np

__all__ = ["nonreference_flags"]

#: HEVC VCL NAL unit types of sub-layer non-reference pictures (even types below 16).
_HEVC_NONREF_TYPES = (0, 2, 4, 6, 8, 10, 12, 14)


#: Bytes :func:`nal_header_positions` compares at a time.
SCAN_BYTES = 1 << 22


def nal_header_positions(payload: np.ndarray) -> np.ndarray:
    """Positions of the first header byte of every NAL unit (the byte after each ``00 00 01``).

    Emulation prevention guarantees that ``00 00 01`` never occurs inside a NAL unit, so every
    match is a start code (a four-byte ``00 00 00 01`` matches at its last three bytes).
    """
    p = np.asarray(payload).view(np.uint8).reshape(-1)
    if p.size < 4:
        return np.empty(0, np.int64)
    found = []
    # In windows of SCAN_BYTES: the comparison's mask is as large as what it scans, and a demux
    # worker's bundle can be tens of MB (its peak memory, issue 16 item 1).
    for lo in range(0, p.size - 3, SCAN_BYTES):
        hi = min(lo + SCAN_BYTES, p.size - 3)
        # Bytes equal to 1 are rare (~1/256 of the data); test the two zeros only there.
        ones = np.flatnonzero(p[lo + 2:hi + 2] == 1) + lo  # p[i + 2] == 1, a header at i + 3
        found.append(ones[(p[ones] == 0) & (p[ones + 1] == 0)])
    return np.concatenate(found).astype(np.int64) + 3


def nonreference_flags(payload: np.ndarray, offsets, sizes, codec: str) -> np.ndarray:
    """Flag the packets that hold a non-reference picture (see the module docstring).

    Args:
        payload: uint8, the Annex B packets back to back (``PacketBundle.payload``).
        offsets: start of each packet in ``payload``.
        sizes: byte size of each packet.
        codec: ``"h264"`` or ``"hevc"``; any other codec flags nothing.

    Returns:
        int64 array, one entry per packet: 1 where every slice NAL unit of the packet belongs
        to a non-reference picture (no picture among these packets predicts from it), else 0.
    """
    offsets = np.asarray(offsets, np.int64).reshape(-1)
    sizes = np.asarray(sizes, np.int64).reshape(-1)
    n = len(offsets)
    flags = np.zeros(n, np.int64)
    if n == 0 or codec not in ("h264", "hevc"):
        return flags
    p = np.asarray(payload).view(np.uint8).reshape(-1)
    heads = nal_header_positions(p)
    header_bytes = 1 if codec == "h264" else 2
    heads = heads[heads + header_bytes <= p.size]
    if heads.size == 0:
        return flags

    # Map each NAL header to the packet that holds it: the last packet starting at or before
    # it, with packets sorted by start (an empty packet sorts before a non-empty one there).
    order = None
    if n > 1:
        step = np.diff(offsets)
        if np.any(step < 0) or np.any((step == 0) & (sizes[1:] < sizes[:-1])):
            order = np.lexsort((sizes, offsets))
            offsets, sizes = offsets[order], sizes[order]
    pkt = np.searchsorted(offsets, heads, side="right") - 1
    inside = pkt >= 0
    pkt_c = np.maximum(pkt, 0)
    inside &= heads + header_bytes <= offsets[pkt_c] + sizes[pkt_c]
    heads, pkt = heads[inside], pkt[inside]

    b0 = p[heads]
    if codec == "h264":
        nal_type = b0 & 0x1F
        slice_ = (nal_type >= 1) & (nal_type <= 5)
        extension = (nal_type == 20) | (nal_type == 21)  # SVC/MVC slices: always kept
        vcl = slice_ | extension
        ref = extension | (slice_ & (((b0 >> 5) & 3) != 0))
    else:
        b1 = p[heads + 1]
        nal_type = (b0 >> 1) & 0x3F
        layer = ((b0 & 1).astype(np.int64) << 5) | (b1 >> 3)
        tid = (b1 & 7).astype(np.int64) - 1
        vcl = nal_type < 32
        if not vcl.any():
            return _unsort(flags, order)
        top = tid[vcl].max()
        nonref = vcl & np.isin(nal_type, _HEVC_NONREF_TYPES) & (tid == top) & (layer == 0)
        ref = vcl & ~nonref

    has_vcl = np.bincount(pkt[vcl], minlength=n) > 0
    has_ref = np.bincount(pkt[ref], minlength=n) > 0
    flags[:] = has_vcl & ~has_ref
    return _unsort(flags, order)


def _unsort(flags: np.ndarray, order: np.ndarray | None) -> np.ndarray:
    if order is None:
        return flags
    out = np.empty_like(flags)
    out[order] = flags
    return out
