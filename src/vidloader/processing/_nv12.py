"""NV12/P016 → RGB conversion with crop and resize, as torch ops that run on any device.

NVDEC hands out NV12 pictures (8-bit video) or P016 pictures (10- and 12-bit video): a
``H×W`` luma plane followed by a ``⌈H/2⌉×W`` plane of interleaved ``U, V`` samples (one pair per
2×2 luma block), i.e. a ``(H + ⌈H/2⌉) × W`` tensor, uint8 for NV12 and uint16 for P016 (the
sample in the high bits: a 10-bit value ``v`` is stored as ``v << 6``), possibly with a row pitch
larger than ``W``. :func:`nv12_to_rgb` turns it into the ``h×w×3`` uint8 RGB the model wants:
crop → resize → YUV→RGB matrix → round/clamp → uint8, written into a preallocated batch slot
when ``out`` is given.

It gives the pictures the CPU executor gets from swscale (``BILINEAR | FULL_CHR_H_INT``), so a
model cannot tell which executor made a batch:

* resize: swscale's own bilinear filter (:mod:`vidloader.processing._resample`: FFmpeg's
  taps, half-pixel centres, area-weighted when shrinking, edges clamped), luma and chroma each
  resampled from their own plane to the output size, chroma sited where the codec's decoder
  says (:func:`chroma_siting`: left for H.264/HEVC, centre for AV1/VP9);
* no resize, 8-bit: chroma repeated over its 2×2 block, as swscale's unscaled ``yuv420p →
  rgb24`` path does (bit-exact with ``VideoFrame.to_ndarray(format="rgb24")`` up to that path's
  rounding, ±3); no resize, 10/12-bit: chroma upsampled by the filter, as swscale does there;
* colour: the stream's matrix (BT.601/709/2020) and range (:func:`color_params`), in float,
  rounded once.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from typing import Literal

import numpy as np
import torch

from ..errors import ConfigError
from ._resample import CHROMA_POSITIONS, FULL_POSITION, resample

Matrix = Literal["bt601", "bt709", "bt2020"]

#: Luma coefficients (Kr, Kb) of each YUV matrix.
_KR_KB = {"bt601": (0.299, 0.114), "bt709": (0.2126, 0.0722), "bt2020": (0.2627, 0.0593)}

#: FFmpeg colorspace names → matrix. Anything else (``unknown``, ``bt470bg``, ``smpte170m``, …)
#: is BT.601, which is what swscale assumes for unspecified video.
_MATRIX_OF_SPACE = {"bt709": "bt709", "bt2020nc": "bt2020", "bt2020c": "bt2020"}


#: Codecs whose FFmpeg decoders report left-sited 4:2:0 chroma when the stream does not say
#: (H.264/HEVC VUI default, and MPEG-2's); others (AV1, VP9) leave it unspecified, which
#: swscale treats as centred. Measured against swscale with PyAV 18 (FFmpeg 8).
_LEFT_SITED = frozenset({"h264", "hevc", "mpeg2video"})


def chroma_siting(codec: str) -> str:
    """Where the 4:2:0 chroma samples of ``codec`` sit for swscale: ``"left"`` or ``"center"``
    (see :data:`vidloader.processing._resample.CHROMA_POSITIONS`). A stream that signals
    another location is not seen: the index does not record it."""
    return "left" if codec in _LEFT_SITED else "center"


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
    a, b = _coefficients_f64(matrix, full_range)
    return (torch.tensor(a, dtype=torch.float32, device=device),
            torch.tensor(b, dtype=torch.float32, device=device))


@functools.lru_cache(maxsize=32)
def _lean_coefficients(matrix: Matrix, full_range: bool, device: str
                       ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """What :func:`_unscaled_8bit` needs of ``(A, b)``: the chroma columns transposed
    (``2 × 3``), ``b + ½`` and the luma weight (0-dim), made on the host and copied once
    (built on the device, a shared tensor could be read by another thread's stream before the
    kernel writing it ran)."""
    a, b = _coefficients_f64(matrix, full_range)
    a32, b32 = a.astype(np.float32), b.astype(np.float32)
    return (torch.tensor(np.ascontiguousarray(a32[:, 1:].T), device=device),
            torch.tensor(b32 + np.float32(0.5), device=device),
            torch.tensor(a32[0, 0], device=device))


def _coefficients_f64(matrix: Matrix, full_range: bool) -> tuple[np.ndarray, np.ndarray]:
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
    return a, -a @ offset


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


def to_p016(nv12: np.ndarray, bit_depth: int) -> np.ndarray:
    """A semi-planar picture of ``bit_depth``-bit samples (:func:`i420_to_nv12` of a 10/12-bit
    ``uint16`` picture) as NVDEC's P016 stores it: each sample shifted to the high bits."""
    return (np.asarray(nv12, np.uint16) << np.uint16(16 - int(bit_depth))).astype(np.uint16)


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
    chroma_loc: str = "left",
) -> torch.Tensor:
    """Convert one NV12 (or P016) picture to RGB, cropping and resizing on the way.

    Args:
        nv12: ``(H + ⌈H/2⌉) × pitch`` tensor (``pitch >= width``), on any device: uint8 NV12,
            or uint16 P016 (10/12-bit samples in the high bits).
        height, width: the picture size ``H``, ``W`` in pixels.
        matrix: YUV matrix (see :func:`color_params`).
        full_range: full (``pc``) instead of limited (``tv``) code values.
        out_size: output ``(h, w)``; default: the crop's size (no resize).
        crop: ``(top, left, h, w)`` window of the picture to use; default: all of it.
        out: a preallocated uint8 ``h × w × 3`` tensor (e.g. a batch slot) to write into.
        chroma_loc: where the chroma samples sit (:func:`chroma_siting` of the codec).

    Returns:
        uint8 ``h × w × 3`` RGB on ``nv12``'s device (``out`` when given).
    """
    res = nv12_to_rgb_batch(
        nv12.unsqueeze(0), height=height, width=width, matrix=matrix, full_range=full_range,
        out_size=out_size, crop=crop, out=None if out is None else out.unsqueeze(0),
        chroma_loc=chroma_loc,
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
    chroma_loc: str = "left",
) -> torch.Tensor:
    """:func:`nv12_to_rgb` for ``N`` pictures of one size: a stacked ``N × rows × pitch``
    tensor or a list of tensors. Returns (or fills ``out``) uint8 ``N × h × w × 3``."""
    nv12 = frames if isinstance(frames, torch.Tensor) else torch.stack(list(frames))
    top, left, ch, cw = _check(nv12, height, width, crop)
    oh, ow = out_size or (ch, cw)
    window = (top, left, ch, cw)
    if (oh, ow) == (ch, cw) and nv12.dtype == torch.uint8 and LEAN_UNSCALED and _even(window):
        lean = _lean_coefficients(matrix, bool(full_range), str(nv12.device))
        return _unscaled_8bit(nv12, height, width, window, lean, out)
    y, u, v = _planes(nv12, height, width)  # converted to float once sliced to the window
    a, b = yuv_to_rgb_coefficients(matrix, full_range, device=nv12.device)
    if (oh, ow) == (ch, cw) and nv12.dtype == torch.uint8:
        # swscale's unscaled 8-bit path: each chroma sample repeated over its 2x2 block.
        yuv = torch.stack([_as_float(y[:, top : top + ch, left : left + cw]),
                           _chroma_nearest(u, *window), _chroma_nearest(v, *window)], dim=-1)
    else:
        yuv = _resized_yuv(y, u, v, window, (oh, ow), (height, width), chroma_loc).permute(0, 2, 3, 1)
    rgb = torch.matmul(yuv, a.T).add_(b).round_().clamp_(0, 255)
    return _into(out, rgb)


def _into(out: torch.Tensor | None, rgb: torch.Tensor) -> torch.Tensor:
    """``rgb`` (float code values, already rounded or to be truncated) as uint8: a new
    tensor, or copied into ``out``."""
    if out is None:
        return rgb.to(torch.uint8)
    if out.shape != rgb.shape or out.dtype != torch.uint8:
        raise ConfigError(f"out must be uint8 of shape {tuple(rgb.shape)}, got {out.dtype} {tuple(out.shape)}")
    out.copy_(rgb)
    return out


#: Convert 8-bit pictures kept at their size (no resize) by :func:`_unscaled_8bit`, in about a
#: third of the memory traffic of the general path. Off (or ``VIDLOADER_LEAN_NV12=0`` in the
#: environment, which NVDEC worker processes inherit): the general path for them too.
LEAN_UNSCALED = os.environ.get("VIDLOADER_LEAN_NV12", "1") != "0"


def _even(window: tuple[int, int, int, int]) -> bool:
    """Whether a crop ``(top, left, h, w)`` covers whole 2×2 chroma blocks."""
    return not any(v % 2 for v in window)


def _unscaled_8bit(nv12, height: int, width: int, window, lean: tuple, out: torch.Tensor | None
                   ) -> torch.Tensor:
    """swscale's unscaled 8-bit path (each chroma sample over its 2×2 block) for a crop of
    whole chroma blocks, in few passes over full-size data.

    Every matrix of :func:`yuv_to_rgb_coefficients` weighs luma alike in R, G and B, so
    ``rgb = a_y·Y + (A_uv·[U, V] + b)``: the chroma term is computed at chroma resolution
    (a quarter of the pixels), and one ``addcmul`` reads the uint8 luma and broadcasts the
    chroma term over each 2×2 block, writing float RGB once. Adding ½ to the chroma term
    and truncating in the final cast rounds half up, where the general path rounds half to
    even: they can differ by one only on an exact tie.

    At 1600×900 the general path moves ~155 bytes per pixel through memory (float luma, two
    gathers per chroma plane, the stacked YUV, the matrix product and three in-place passes
    over float RGB), this one ~52 (the float RGB written, clamped in place, cast).

    ``lean``: :func:`_lean_coefficients` of the matrix and range."""
    a_uv, b_half, a_y = lean
    top, left, ch, cw = window
    n = nv12.shape[0]
    chw = (width + 1) // 2
    uv = nv12[:, height + top // 2 : height + (top + ch) // 2, : 2 * chw].unflatten(2, (chw, 2))
    uv = uv[:, :, left // 2 : (left + cw) // 2]  # [N, ch/2, cw/2, 2]
    chroma = torch.matmul(uv.float(), a_uv).add_(b_half)  # [N, ch/2, cw/2, 3]
    luma = nv12[:, top : top + ch, left : left + cw].unflatten(1, (ch // 2, 2)).unflatten(3, (cw // 2, 2))
    rgb = torch.addcmul(chroma[:, :, None, :, None, :], luma.unsqueeze(-1), a_y)
    rgb = rgb.reshape(n, ch, cw, 3).clamp_(0, 255)  # a view, but for column-major input
    return _into(out, rgb)  # the cast truncates: with the ½ added, rounds half up


def conversion_bytes(height: int, width: int, out_hw: tuple[int, int], *, deep: bool = False) -> int:
    """Peak bytes that :func:`nv12_to_rgb_batch` allocates per picture converting a whole
    ``height × width`` NV12 (or, ``deep``, P016) picture to ``out_hw`` (the loader's path:
    crops are cut from its result), its uint8 result included, its input and the cached
    filter weights not. An upper estimate from the kernels' steps, checked against what they
    allocate on the CPU (``tests/test_memory_budget.py``); on the GPU PyTorch's caching
    allocator keeps this high-water mark per CUDA stream.

    Resized: the luma plane as float32 (``4·H·W``) and its first matrix product (``4·H·ow``
    or ``4·oh·W``), or the float chroma planes and theirs; then the float YUV, its colour
    product and the uint8 result (``48·oh·ow``, measured 46.5). Unscaled 8-bit, even sizes
    (:func:`_unscaled_8bit`): the float RGB, the uint8 result and the quarter-size chroma term
    (``20·H·W``, measured 18); odd sizes: luma and both chroma planes at full resolution,
    stacked, and their product (``30·H·W``, measured 27).
    """
    h, w = int(height), int(width)
    oh, ow = (int(v) for v in out_hw)
    if (oh, ow) == (h, w) and not deep:
        return (20 if LEAN_UNSCALED and _even((0, 0, h, w)) else 30) * h * w
    first_product = 4 * max(h * ow, oh * w)
    return max(4 * h * w + first_product + 4 * oh * ow, 48 * oh * ow)


def nv12_rows(height: int) -> int:
    """Rows of an NV12 (or P016) picture of ``height`` lines: the luma plane, then the chroma
    plane of ``⌈height / 2⌉`` interleaved UV lines."""
    return height + (height + 1) // 2


def _check(nv12: torch.Tensor, height: int, width: int, crop) -> tuple[int, int, int, int]:
    if nv12.dtype not in (torch.uint8, torch.uint16) or nv12.dim() != 3:
        raise ConfigError(f"NV12/P016 input must be uint8/uint16 of shape (N, rows, pitch), got {nv12.dtype} {tuple(nv12.shape)}")
    rows = nv12_rows(height)
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


def _as_float(plane: torch.Tensor) -> torch.Tensor:
    """A plane as float32 in 8-bit code values: P016's ``v << (16 - bits)`` divided by 256.

    uint16 goes through an int16 view: every torch build converts int16 on every device
    (uint16 has "limited support"), and the sign is undone by a modulo."""
    if plane.dtype == torch.uint16:
        return plane.view(torch.int16).float().remainder_(65536.0).div_(256.0)
    return plane.float()


def _chroma_nearest(c: torch.Tensor, top: int, left: int, ch: int, cw: int) -> torch.Tensor:
    """Float chroma at every luma pixel of the crop, each sample repeated over its 2×2 block."""
    r0, c0 = top // 2, left // 2
    part = _as_float(c[:, r0 : (top + ch - 1) // 2 + 1, c0 : (left + cw - 1) // 2 + 1])
    rows = torch.arange(top, top + ch, device=c.device) // 2 - r0
    cols = torch.arange(left, left + cw, device=c.device) // 2 - c0
    return part.index_select(1, rows).index_select(2, cols)


def _resized_yuv(y, u, v, crop, size, picture, chroma_loc) -> torch.Tensor:
    """``N × 3 × h × w`` float YUV: luma and chroma each resampled from their own plane with
    swscale's bilinear filter, chroma from where its samples sit."""
    top, left, ch, cw = crop
    height, width = picture
    yr = resample(_as_float(y[:, top : top + ch, left : left + cw]).unsqueeze(1), size)
    if crop == (0, 0, height, width):
        uv, pos = torch.stack([_as_float(u), _as_float(v)], 1), CHROMA_POSITIONS[chroma_loc]
    elif not (top % 2 or left % 2 or ch % 2 or cw % 2):
        t, lf = top // 2, left // 2
        window = (slice(None), slice(t, t + ch // 2), slice(lf, lf + cw // 2))
        uv = torch.stack([_as_float(u[window]), _as_float(v[window])], 1)
        pos = CHROMA_POSITIONS[chroma_loc]
    else:
        # The window cuts through chroma samples: resample chroma repeated to luma resolution.
        uv = torch.stack([_chroma_nearest(u, *crop), _chroma_nearest(v, *crop)], 1)
        pos = (FULL_POSITION, FULL_POSITION)
    return torch.cat([yr, resample(uv, size, src_pos=pos)], dim=1)
