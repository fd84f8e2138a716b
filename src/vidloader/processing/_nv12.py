"""NV12 → RGB conversion with crop and resize, as torch ops that run on any device.

NVDEC hands out NV12 pictures: a ``H×W`` luma plane followed by a ``⌈H/2⌉×W`` plane of
interleaved ``U, V`` samples (one pair per 2×2 luma block), i.e. a ``(H + ⌈H/2⌉) × W`` uint8
tensor, possibly with a row pitch larger than ``W``. :func:`nv12_to_rgb` turns it into the
``h×w×3`` uint8 RGB the model wants in one pass over the output: crop → resize (bilinear,
antialiased when shrinking, luma and chroma each resampled from their own plane) → YUV→RGB
matrix → round/clamp → uint8, written into a preallocated batch slot when ``out`` is given.

Without resize, chroma is upsampled by repetition, as swscale's unscaled ``yuv420p → rgb24``
path does, so the result matches ``VideoFrame.to_ndarray(format="rgb24")`` within ±3 (tested).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F

from ..errors import ConfigError

Matrix = Literal["bt601", "bt709", "bt2020"]

#: Luma coefficients (Kr, Kb) of each YUV matrix.
_KR_KB = {"bt601": (0.299, 0.114), "bt709": (0.2126, 0.0722), "bt2020": (0.2627, 0.0593)}

#: FFmpeg colorspace names → matrix. Anything else (``unknown``, ``bt470bg``, ``smpte170m``, …)
#: is BT.601, which is what swscale assumes for unspecified video.
_MATRIX_OF_SPACE = {"bt709": "bt709", "bt2020nc": "bt2020", "bt2020c": "bt2020"}


def color_params(color_space: str, color_range: str, pix_fmt: str = "") -> tuple[Matrix, bool]:
    """The ``(matrix, full_range)`` to decode a video with, following FFmpeg's defaults.

    Args:
        color_space: ``VideoRecord.color_space`` (``"bt709"``, ``"unknown"`` …).
        color_range: ``VideoRecord.color_range``: ``"pc"`` is full range, anything else limited.
        pix_fmt: ``VideoRecord.pix_fmt``; the ``yuvj*`` formats are full range.
    """
    matrix = _MATRIX_OF_SPACE.get(color_space, "bt601")
    full = color_range == "pc" or pix_fmt.startswith("yuvj")
    return matrix, full  # type: ignore[return-value]


def yuv_to_rgb_coefficients(
    matrix: Matrix, full_range: bool, *, device=None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(A, b)`` with ``rgb = A @ [Y, U, V] + b`` for 8-bit code values (float32).

    Cached per ``(matrix, range, device)``: building them on a GPU is a host-to-device copy,
    which per frame would cost more than the conversion. Treat the tensors as read-only.
    """
    return _coefficients(matrix, bool(full_range), str(torch.device(device or "cpu")))


@functools.lru_cache(maxsize=32)
def _coefficients(matrix: Matrix, full_range: bool, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    if matrix not in _KR_KB:
        raise ConfigError(f"matrix must be one of {sorted(_KR_KB)}, got {matrix!r}")
    kr, kb = _KR_KB[matrix]
    kg = 1.0 - kr - kb
    m = np.array(
        [[1.0, 0.0, 2 * (1 - kr)],
         [1.0, -2 * kb * (1 - kb) / kg, -2 * kr * (1 - kr) / kg],
         [1.0, 2 * (1 - kb), 0.0]],
        np.float64,
    )
    if full_range:
        scale, offset = np.array([1.0, 1.0, 1.0]), np.array([0.0, 128.0, 128.0])
    else:
        scale, offset = np.array([255 / 219, 255 / 224, 255 / 224]), np.array([16.0, 128.0, 128.0])
    a = m * scale[None, :]
    b = -a @ offset
    return (torch.tensor(a, dtype=torch.float32, device=device),
            torch.tensor(b, dtype=torch.float32, device=device))


def i420_to_nv12(yuv420p):
    """Re-pack a planar ``yuv420p`` picture (``VideoFrame.to_ndarray(format="yuv420p")``,
    numpy or torch, ``(H*3/2) × W``) as NV12 (luma plane, then interleaved U/V rows)."""
    is_np = isinstance(yuv420p, np.ndarray)
    t = torch.from_numpy(yuv420p) if is_np else yuv420p
    rows, w = t.shape
    h = rows * 2 // 3
    ch, cw = h // 2, w // 2
    chroma = t[h:].reshape(2, ch, cw)
    uv = chroma.permute(1, 2, 0).reshape(ch, w)
    out = torch.cat([t[:h], uv], 0)
    return out.numpy() if is_np else out


def nv12_to_rgb(
    nv12: torch.Tensor,
    *,
    height: int,
    width: int,
    matrix: Matrix = "bt601",
    full_range: bool = False,
    out_size: tuple[int, int] | None = None,
    crop: tuple[int, int, int, int] | None = None,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Convert one NV12 picture to RGB, cropping and resizing on the way.

    Args:
        nv12: uint8 ``(H + ⌈H/2⌉) × pitch`` tensor (``pitch >= width``), on any device.
        height, width: the picture size ``H``, ``W`` in pixels.
        matrix: YUV matrix (see :func:`color_params`).
        full_range: full (``pc``) instead of limited (``tv``) code values.
        out_size: output ``(h, w)``; default: the crop's size (no resize).
        crop: ``(top, left, h, w)`` window of the picture to use; default: all of it.
        out: a preallocated uint8 ``h × w × 3`` tensor (e.g. a batch slot) to write into.

    Returns:
        uint8 ``h × w × 3`` RGB on ``nv12``'s device (``out`` when given).
    """
    res = nv12_to_rgb_batch(
        nv12.unsqueeze(0), height=height, width=width, matrix=matrix, full_range=full_range,
        out_size=out_size, crop=crop, out=None if out is None else out.unsqueeze(0),
    )
    return res[0] if out is None else out


def nv12_to_rgb_batch(
    frames: torch.Tensor | Sequence[torch.Tensor],
    *,
    height: int,
    width: int,
    matrix: Matrix = "bt601",
    full_range: bool = False,
    out_size: tuple[int, int] | None = None,
    crop: tuple[int, int, int, int] | None = None,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """:func:`nv12_to_rgb` for ``N`` pictures of one size: a stacked ``N × rows × pitch``
    tensor or a list of tensors. Returns (or fills ``out``) uint8 ``N × h × w × 3``."""
    nv12 = frames if isinstance(frames, torch.Tensor) else torch.stack(list(frames))
    top, left, ch, cw = _check(nv12, height, width, crop)
    oh, ow = out_size or (ch, cw)
    y, u, v = _planes(nv12, height, width)
    y = y[:, top : top + ch, left : left + cw]
    if (oh, ow) == (ch, cw):
        u, v = _chroma_nearest(u, top, left, ch, cw), _chroma_nearest(v, top, left, ch, cw)
        yuv = torch.stack([y.float(), u.float(), v.float()], dim=-1)
    else:
        yuv = _resized_yuv(y, u, v, (top, left, ch, cw), (oh, ow)).permute(0, 2, 3, 1)
    a, b = yuv_to_rgb_coefficients(matrix, full_range, device=nv12.device)
    rgb = torch.matmul(yuv, a.T).add_(b).round_().clamp_(0, 255)
    if out is None:
        return rgb.to(torch.uint8)
    if out.shape != rgb.shape or out.dtype != torch.uint8:
        raise ConfigError(f"out must be uint8 of shape {tuple(rgb.shape)}, got {out.dtype} {tuple(out.shape)}")
    out.copy_(rgb)
    return out


def _check(nv12: torch.Tensor, height: int, width: int, crop) -> tuple[int, int, int, int]:
    if nv12.dtype != torch.uint8 or nv12.dim() != 3:
        raise ConfigError(f"NV12 input must be uint8 of shape (N, rows, pitch), got {nv12.dtype} {tuple(nv12.shape)}")
    rows = height + (height + 1) // 2
    if nv12.shape[1] < rows or nv12.shape[2] < width:
        raise ConfigError(f"NV12 tensor {tuple(nv12.shape[1:])} is too small for a {height}x{width} picture (needs {rows} rows)")
    top, left, ch, cw = crop if crop is not None else (0, 0, height, width)
    if min(top, left) < 0 or ch <= 0 or cw <= 0 or top + ch > height or left + cw > width:
        raise ConfigError(f"crop {crop} does not fit in a {height}x{width} picture")
    return int(top), int(left), int(ch), int(cw)


def _planes(nv12: torch.Tensor, height: int, width: int):
    """Views of Y ``(N, H, W)`` and of U, V ``(N, ⌈H/2⌉, ⌈W/2⌉)`` (no copy)."""
    chh, chw = (height + 1) // 2, (width + 1) // 2
    y = nv12[:, :height, :width]
    uv = nv12[:, height : height + chh, : 2 * chw].unflatten(2, (chw, 2))
    return y, uv[..., 0], uv[..., 1]


def _chroma_nearest(c: torch.Tensor, top: int, left: int, ch: int, cw: int) -> torch.Tensor:
    """Chroma at every luma pixel of the crop, each sample repeated over its 2×2 block."""
    rows = torch.arange(top, top + ch, device=c.device) // 2
    cols = torch.arange(left, left + cw, device=c.device) // 2
    return c.index_select(1, rows).index_select(2, cols)


def _resize(x: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    shrink = size[0] < x.shape[-2] or size[1] < x.shape[-1]
    return F.interpolate(x, size=size, mode="bilinear", align_corners=False, antialias=shrink)


def _resized_yuv(y, u, v, crop, size) -> torch.Tensor:
    """``N × 3 × h × w`` float YUV: luma and chroma each resampled from their own plane."""
    top, left, ch, cw = crop
    yr = _resize(y.unsqueeze(1).float(), size)
    if top % 2 or left % 2 or ch % 2 or cw % 2:
        # The window cuts through chroma samples: resample chroma repeated to luma resolution.
        uv = torch.stack([_chroma_nearest(u, top, left, ch, cw), _chroma_nearest(v, top, left, ch, cw)], 1)
    else:
        t, lf = top // 2, left // 2
        uv = torch.stack([u, v], 1)[:, :, t : t + ch // 2, lf : lf + cw // 2]
    return torch.cat([yr, _resize(uv.float(), size)], dim=1)
