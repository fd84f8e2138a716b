"""Crop + resize + flip + normalize of a batch of images in one Triton kernel.

Imported only where Triton is (torch's CUDA wheels bring it; the CPU wheel does not):
:func:`._batched.crop_resize_batch` falls back to the batched matmuls without it.

Each output pixel is the antialiased bilinear resize of its image's window, computed where
it is written: ``out[b, i, j] = Σ_y Σ_x wy[i, y] · wx[j, x] · image[top + y, left + x]``,
the weights those of ``F.interpolate(mode="bilinear", antialias=True, align_corners=False)``
on CUDA (``upsample_gen2d_aa_out_frame``: float32, a tent of half-width ``max(1, in/out)``
centred at ``(i + ½)·in/out``, its span truncated toward zero and clipped to the window,
normalised), pixels outside the image zero (``crop="random"``'s padding). The images are
read where the decoder put them (:class:`~._packed.PackedImages`' flat buffer), so nothing
is packed, padded or gathered first: no intermediate the size of the batch, one launch.

Against the batched matmuls (float16 products, a zero-padded float16 copy of the batch and
two ``bmm``; about twenty launches, a few hundred MB of intermediates at 256 ImageNet-sized
images), this is float32 throughout. It is not bit-equal to torch's kernel: the sums run in
another order, and on the GPU Triton divides with ``div.full.f32`` (approximate) and fuses
multiply-adds. uint8 outputs differ from torch's by at most 1 (0.06% of values off by 1
from the float64 reference at 256 ImageNet-sized images, H200, ``session29-4``).

Each output pixel reads every tap of its tent in both directions (not two separable passes):
the work grows with the square of the shrink, ~2.2² for a 500×375 image to 224², but ~13.5²
for a 4032×3024 photo centre-cropped to 224.
"""

from __future__ import annotations

import triton
import triton.language as tl

#: Fields of the per-image parameter array, one row each (int64 ``[len(FIELDS), B]``).
FIELDS = ("start", "height", "width", "top", "left", "window_h", "window_w", "flip")

#: Output pixels per program.
BLOCK = 256


@triton.jit
def _span(center, support, size):
    """First input pixel and end (exclusive) of a tent's span (torch truncates toward zero,
    then clips to the input)."""
    lo = tl.maximum((center - support + 0.5).to(tl.int32), 0)
    hi = tl.minimum((center + support + 0.5).to(tl.int32), size)
    return lo, hi


@triton.jit
def _tent(pos, center, invscale):
    return tl.maximum(1.0 - tl.abs((pos.to(tl.float32) - center + 0.5) * invscale), 0.0)


@triton.jit(do_not_specialize=["count", "out_h", "out_w", "s_b", "s_y", "s_x", "s_c"])
def crop_resize_kernel(pixels, table, coef, out, count, out_h, out_w, s_b, s_y, s_x, s_c,
                       OUT_UINT8: tl.constexpr, BLOCK: tl.constexpr):
    """Program ``b · tiles + tile``: ``BLOCK`` output pixels of image ``b``, all three
    channels (a one-axis grid, which may pass 65,535 programs, unlike a second axis; an
    image's tiles run one after another, as on session 29's measured two-axis grid).
    (``table``, not ``params``: Triton's argument binder has a local of that name.)"""
    tiles = tl.cdiv(out_h * out_w, BLOCK)
    b = tl.program_id(0) // tiles
    start = tl.load(table + b)
    h = tl.load(table + count + b).to(tl.int32)
    w = tl.load(table + 2 * count + b).to(tl.int32)
    top = tl.load(table + 3 * count + b).to(tl.int32)
    left = tl.load(table + 4 * count + b).to(tl.int32)
    win_h = tl.load(table + 5 * count + b).to(tl.int32)
    win_w = tl.load(table + 6 * count + b).to(tl.int32)
    flip = tl.load(table + 7 * count + b)

    offs = (tl.program_id(0) % tiles) * BLOCK + tl.arange(0, BLOCK)
    live = offs < out_h * out_w
    i = offs // out_w
    j = offs % out_w
    j_src = tl.where(flip != 0, out_w - 1 - j, j)  # a flip reverses the output's columns

    scale_y = win_h.to(tl.float32) / out_h
    scale_x = win_w.to(tl.float32) / out_w
    support_y = tl.maximum(scale_y, 1.0)  # bilinear: half-width 1, widened when shrinking
    support_x = tl.maximum(scale_x, 1.0)
    inv_y = 1.0 / support_y
    inv_x = 1.0 / support_x
    center_y = scale_y * (i.to(tl.float32) + 0.5)
    center_x = scale_x * (j_src.to(tl.float32) + 0.5)
    y_lo, y_hi = _span(center_y, support_y, win_h)
    x_lo, x_hi = _span(center_x, support_x, win_w)
    taps_y = (2.0 * support_y).to(tl.int32) + 2  # at least every span's length
    taps_x = (2.0 * support_x).to(tl.int32) + 2

    sum_x = tl.zeros([BLOCK], dtype=tl.float32)
    for kx in range(0, taps_x):
        x = x_lo + kx
        sum_x += tl.where(x < x_hi, _tent(x, center_x, inv_x), 0.0)

    channel = tl.arange(0, 4)
    has_channel = channel < 3
    acc = tl.zeros([BLOCK, 4], dtype=tl.float32)
    sum_y = tl.zeros([BLOCK], dtype=tl.float32)
    for ky in range(0, taps_y):
        y = y_lo + ky
        wy = tl.where(live & (y < y_hi), _tent(y, center_y, inv_y), 0.0)
        sum_y += wy
        row_y = top + y
        row_in = (wy > 0.0) & (row_y >= 0) & (row_y < h)
        row_start = start + row_y.to(tl.int64) * w
        row = tl.zeros([BLOCK, 4], dtype=tl.float32)
        for kx in range(0, taps_x):
            x = x_lo + kx
            wx = tl.where(x < x_hi, _tent(x, center_x, inv_x), 0.0)
            col = left + x
            take = row_in & (wx > 0.0) & (col >= 0) & (col < w)  # outside the image: zero
            address = (row_start + col) * 3
            pixel = tl.load(pixels + address[:, None] + channel[None, :],
                            mask=take[:, None] & has_channel[None, :], other=0)
            row += wx[:, None] * pixel.to(tl.float32)
        acc += wy[:, None] * row

    value = acc / tl.where(live, sum_y * sum_x, 1.0)[:, None]  # dead lanes summed nothing
    # int64: an in-memory unit's output may pass 2**31 elements (b·s_b alone at 14,300 224² CHW)
    target = (out + b.to(tl.int64) * s_b + i[:, None].to(tl.int64) * s_y + j[:, None] * s_x
              + channel[None, :] * s_c)
    store = live[:, None] & has_channel[None, :]
    if OUT_UINT8:
        rounded = tl.floor(value + 0.5)
        odd = (rounded - 2.0 * tl.floor(rounded * 0.5)) != 0.0
        rounded = tl.where((rounded - value == 0.5) & odd, rounded - 1.0, rounded)  # half to even
        tl.store(target, tl.minimum(tl.maximum(rounded, 0.0), 255.0).to(tl.uint8), mask=store)
    else:
        mul = tl.load(coef + channel, mask=has_channel, other=0.0)
        add = tl.load(coef + 3 + channel, mask=has_channel, other=0.0)
        tl.store(target, (value * mul[None, :] + add[None, :]).to(out.dtype.element_ty),
                 mask=store)


def launch(pixels, params, coef, out, out_hw: tuple[int, int], strides: tuple[int, int, int, int],
           *, out_uint8: bool) -> None:
    """One launch over the batch: ``params`` int64 ``[len(FIELDS), B]`` on the device,
    ``coef`` float32 ``[2, 3]`` (mul, add; unused for uint8), ``strides`` of ``out`` in
    elements for (image, row, column, channel)."""
    count = params.shape[1]
    oh, ow = out_hw
    grid = (count * triton.cdiv(oh * ow, BLOCK),)
    crop_resize_kernel[grid](pixels, params, coef, out, count, oh, ow, *strides,
                             OUT_UINT8=out_uint8, BLOCK=BLOCK)
