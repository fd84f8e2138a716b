"""swscale's ``SWS_BILINEAR`` filter, with FFmpeg's own taps, applied with torch on any device.

The CPU executor resizes with swscale (``BILINEAR | FULL_CHR_H_INT``); the NVDEC path resizes
on the GPU. For both to give the same pictures, the GPU uses the very filter swscale builds:
:func:`bilinear_taps` is a port of ``initFilter`` (``libswscale/utils.c``, FFmpeg 8) for the
bilinear case: its integer coefficients, its pixel-centre convention and its edge handling.

What that filter is, in words: output pixel ``i`` is centred at source coordinate
``(i + ½)·src/dst − ½`` (pixel centres at half-integers, as ``align_corners=False``); when
shrinking, the weights are a triangle ("tent") of half-width ``src/dst`` source pixels, i.e.
an area-weighted, antialiased bilinear filter (PIL's and ``interpolate(antialias=True)``'s
filter); when enlarging, plain bilinear interpolation. Taps outside the picture are moved to
the edge pixel (clamp to edge). Coefficients are integers summing to ``2^14`` horizontally
and ``2^12`` vertically, rounded with error diffusion, as swscale stores them.

Chroma samples sit where the stream says (``chroma_location``): swscale then shifts the chroma
filter by the siting; :data:`CHROMA_POSITIONS` gives swscale's positions for 4:2:0 chroma.

:func:`resample` applies a filter as two matrix products (the weights as a dense banded
matrix): exact in float32, a few launches per batch of frames. Under
``torch.backends.cuda.matmul.allow_tf32`` (``set_float32_matmul_precision("high")``) the
products run in TF32 and results may differ from swscale by one more code value.
"""

from __future__ import annotations

import functools

import numpy as np
import torch

#: swscale's ``SWS_MAX_REDUCE_CUTOFF``: leading/trailing taps summing below it are dropped.
_MAX_REDUCE_CUTOFF = 0.002

#: ``(horizontal, vertical)`` position of 4:2:0 chroma samples in swscale's units (1/256 of a
#: luma pixel, after ``get_local_pos``): what ``av_chroma_location_enum_to_pos`` gives for
#: each ``AVChromaLocation``. FFmpeg's graph treats an unspecified location as ``center``.
CHROMA_POSITIONS = {
    "left": (64, 128), "center": (128, 128), "topleft": (64, 64), "top": (128, 64),
    "bottomleft": (64, 192), "bottom": (128, 192),
}

#: Position of a sample that is not subsampled (luma; chroma of 4:4:4 and of RGB output).
FULL_POSITION = 128


def _cdiv(a: int, b: int) -> int:
    """C's integer division (truncates toward zero)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def _rounded_div(a: int, b: int) -> int:
    """FFmpeg's ``ROUNDED_DIV``."""
    return _cdiv(a + (b >> 1) if a >= 0 else a - (b >> 1), b)


def _log2(v: int) -> int:
    return v.bit_length() - 1 if v > 0 else 0


@functools.lru_cache(maxsize=512)
def bilinear_taps(src: int, dst: int, src_pos: int = FULL_POSITION, dst_pos: int = FULL_POSITION,
                  one: int = 1 << 14, align: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """swscale's bilinear filter from ``src`` to ``dst`` samples: ``(first, coeffs)``, where
    output ``i`` is ``sum_j coeffs[i, j] * x[first[i] + j] / one``.

    Args:
        src, dst: sizes along the axis.
        src_pos, dst_pos: sample position in 1/256 pixel (``get_local_pos``'s result): 128 for
            full-resolution samples, :data:`CHROMA_POSITIONS` for subsampled chroma.
        one: the coefficients' sum: ``1 << 14`` horizontally, ``1 << 12`` vertically.
        align: filter length multiple (x86 and NEON builds: 4 horizontally, 2 vertically);
            it decides which negligible trailing taps are kept.
    """
    x_inc = ((src << 16) + (dst >> 1)) // dst
    fone = 1 << (54 - min(_log2(src // dst), 8))
    if abs(x_inc - 0x10000) < 10 and src_pos == dst_pos:  # unscaled
        return np.arange(dst, dtype=np.int64), np.full((dst, 1), one, np.int64)
    size = 3 if x_inc <= 1 << 16 else 1 + (2 * src + dst - 1) // dst
    size = max(min(size, src - 2), 1)
    filt = [[0] * size for _ in range(dst)]
    pos = [0] * dst
    x_dst_in_src = ((dst_pos * x_inc) >> 7) - ((src_pos * 0x10000) >> 7)
    for i in range(dst):
        xx = _cdiv(x_dst_in_src - (size - 2) * (1 << 16), 1 << 17)
        pos[i] = xx
        for j in range(size):
            d = abs(xx * (1 << 17) - x_dst_in_src) << 13
            if x_inc > 1 << 16:
                d = d * dst // src
            filt[i][j] = max((1 << 30) - d, 0) * (fone >> 30)
            xx += 1
        x_dst_in_src += 2 * x_inc
    filt, pos, size = _reduce(filt, pos, size, fone, align)
    _fix_borders(filt, pos, size, src)
    return np.asarray(pos, np.int64), _normalize(filt, one)


def _reduce(filt: list, pos: list, size: int, fone: int, align: int) -> tuple[list, list, int]:
    """initFilter's steps 1 and 2: drop near-zero leading taps (moving the filter right), find
    the smallest length holding every filter's non-negligible taps, round it up to ``align``."""
    dst = len(filt)
    cutoff_limit = _MAX_REDUCE_CUTOFF * fone
    min_size = 0
    for i in range(dst - 1, -1, -1):
        row = filt[i]
        cut = 0
        for _ in range(size):
            cut += abs(row[0])
            if cut > cutoff_limit or (i < dst - 1 and pos[i] >= pos[i + 1]):
                break
            row[:] = row[1:] + [0]
            pos[i] += 1
        keep, cut = size, 0
        for j in range(size - 1, 0, -1):
            cut += abs(row[j])
            if cut > cutoff_limit:
                break
            keep -= 1
        min_size = max(min_size, keep)
    if min_size == 1 and align == 2:
        align = 1  # swscale's special case for unscaled vertical filtering
    new = -(-min_size // align) * align
    return [(row + [0] * new)[:new] for row in filt], pos, new


def _fix_borders(filt: list, pos: list, size: int, src: int) -> None:
    """initFilter's "fix borders": taps left of 0 or right of ``src - 1`` move to the edge."""
    for i, row in enumerate(filt):
        if pos[i] < 0:
            for j in range(1, size):
                left = max(j + pos[i], 0)
                row[left] += row[j]
                row[j] = 0
            pos[i] = 0
        if pos[i] + size > src:
            shift = pos[i] + min(size - src, 0)
            acc = 0
            for j in range(size - 1, -1, -1):
                if pos[i] + j >= src:
                    acc += row[j]
                    row[j] = 0
            for j in range(size - 1, -1, -1):
                row[j] = 0 if j < shift else row[j - shift]
            pos[i] -= shift
            row[src - 1 - pos[i]] += acc


def _normalize(filt: list, one: int) -> np.ndarray:
    """initFilter's normalisation: integer taps summing to ``one``, rounding errors carried."""
    out = np.zeros((len(filt), len(filt[0]) if filt else 0), np.int64)
    for i, row in enumerate(filt):
        total = (sum(row) + one // 2) // one or 1
        error = 0
        for j, c in enumerate(row):
            v = c + error
            q = _rounded_div(v, total)
            out[i, j] = q
            error = v - q * total
    return out


def weight_matrix(src: int, dst: int, *, src_pos: int = FULL_POSITION, dst_pos: int = FULL_POSITION,
                  vertical: bool = False) -> np.ndarray:
    """The filter as a dense ``dst × src`` float64 matrix (rows sum to 1)."""
    first, coeffs = (bilinear_taps(src, dst, src_pos, dst_pos, 1 << 12, 2) if vertical
                     else bilinear_taps(src, dst, src_pos, dst_pos, 1 << 14, 4))
    m = np.zeros((dst, src), np.float64)
    cols = first[:, None] + np.arange(coeffs.shape[1])
    rows = np.broadcast_to(np.arange(dst)[:, None], cols.shape)
    inside = cols < src  # zero taps past the end (swscale pads them)
    np.add.at(m, (rows[inside], cols[inside]), coeffs[inside])
    return m / ((1 << 12) if vertical else (1 << 14))


@functools.lru_cache(maxsize=256)
def _weights(src: int, dst: int, src_pos: int, dst_pos: int, vertical: bool, device: str) -> torch.Tensor:
    # Cached per device: building them on a GPU is a host-to-device copy.
    m = weight_matrix(src, dst, src_pos=src_pos, dst_pos=dst_pos, vertical=vertical)
    return torch.tensor(m, dtype=torch.float32, device=device)


def resample(x: torch.Tensor, size: tuple[int, int], *, src_pos: tuple[int, int] = (FULL_POSITION, FULL_POSITION)) -> torch.Tensor:
    """Resize float ``(..., H, W)`` to ``(..., h, w)`` with swscale's bilinear filter.

    Args:
        x: float32 planes, any leading dimensions, on any device.
        size: ``(h, w)``.
        src_pos: ``(horizontal, vertical)`` sample position of ``x`` in 1/256 pixel (see
            :data:`CHROMA_POSITIONS`); the output's samples are full-resolution (128).
    """
    h, w = x.shape[-2:]
    oh, ow = size
    dev = str(x.device)
    hx, vx = src_pos
    horizontal = None if (w, hx) == (ow, FULL_POSITION) else _weights(w, ow, hx, FULL_POSITION, False, dev)
    vertical = None if (h, vx) == (oh, FULL_POSITION) else _weights(h, oh, vx, FULL_POSITION, True, dev)
    rows_first = vertical is not None and oh * w * (h + ow) < h * ow * (w + oh)
    if rows_first:
        x = torch.matmul(vertical, x)
        vertical = None
    if horizontal is not None:
        x = torch.matmul(x, horizontal.T)
    if vertical is not None:
        x = torch.matmul(vertical, x)
    return x
