"""Crop + resize + flip + normalize of a whole batch of images of different sizes, in a
fixed number of kernels: per-image separable weight matrices and two batched matmuls.

The per-image path (:func:`._augment.crop_resize`) costs several kernel launches per image
(window, permute, cast, ``interpolate``, round, copy), which caps a GPU loader at a few
thousand images/s however fast the decoder. Here a batch costs one copy per image (its
window into a zero-padded float batch ``[B, Hm, 3, Wm]``) and about twenty launches in all:

- the weights are those of ``F.interpolate(mode="bilinear", antialias=True,
  align_corners=False)`` (torch's ``_compute_weights_aa``: a tent of half-width
  ``max(1, in/out)`` centred at ``(i + ½)·in/out``, clipped to the window, normalised),
  built on the device for the whole batch from each image's window size: the crop is
  folded in by making the matrices window-relative, the flip by reversing the rows of the
  column matrix, zero padding (``crop="random"``) by the zeros of the padded batch;
- rows then columns: ``[B, oh, Hm] @ [B, Hm, 3·Wm]`` then ``[B, oh·3, Wm] @ [B, Wm, ow]``,
  with no transpose copy in between (the ``[B, H, 3, W]`` layout makes both views free);
- normalize is folded into the single kernel that writes the output in its dtype and layout
  (``addcmul`` into the destination), so a float batch is never rounded to uint8 first.

Against the per-image path, with float32 products (the CPU, or ``compute_dtype=torch.float32``):
uint8 outputs differ by at most 1 (float32 rounding of the same weights; torch's CPU uint8
kernel uses 16-bit fixed-point weights); float outputs differ by at most ``0.5/255/std`` plus
float32 error, the uint8 rounding the per-image path does before normalising. Under
``torch.backends.cuda.matmul.allow_tf32`` the products run in TF32 and the uint8 difference
may reach 2.

On CUDA the padded batch, the weights and the products are float16 by default
(:data:`CUDA_COMPUTE_DTYPE`): pixels are exact in float16 and the weights keep 11 bits, so
before rounding the output is within 0.3 code values of float32's (mean 0.03; measured on
the H200, ``benchmarks/results/gpu/session19-1``); uint8 outputs then differ from float32's by
at most 1 on a few percent of values (a bound measured, not derived: rounding the weights and
the intermediate product could reach ~0.4 at worst, more under torch's reduced-precision
float16 reductions). It halved the packed batch's bytes and moved the products
to tensor cores: the augmentation's GPU time a batch of 256 went from 13.2 to 9.3 ms there.
``compute_dtype=torch.float32`` keeps the exact path.

On the CPU this is slower than the per-image uint8 kernel (dense matrices do ~50× the
multiply-adds of the banded filter; see ``benchmarks/results/cpu/images/``), so
:func:`crop_resize_batch` keeps the per-image path for CPU tensors.
"""

from __future__ import annotations

import contextlib
import math

import numpy as np
import torch

from ._augment import Windows, crop_resize
from ._packed import PackedImages
from ._spec import ImageProcess

_TORCH_DTYPES = {"uint8": torch.uint8, "float32": torch.float32, "float16": torch.float16}


def to_device(array: np.ndarray, device: torch.device) -> torch.Tensor:
    """A small host array on ``device`` without blocking the host: a copy from pageable
    memory would wait for the stream, i.e. for the decode this batch waits on."""
    tensor = torch.from_numpy(np.ascontiguousarray(array))
    if device.type != "cuda":
        return tensor
    return tensor.pin_memory().to(device, non_blocking=True)


def crop_flip_gather(pixels: torch.Tensor, indices: np.ndarray, windows: Windows,
                     out_hw: tuple[int, int]) -> torch.Tensor:
    """Fixed-size windows (``crop="random"`` with padding, or ``"none"``) of images picked
    from a whole dataset: uint8 ``[N, oh, ow, C]`` where row ``i`` is image ``indices[i]`` of
    ``pixels`` (uint8 ``[M, H, W, C]``, any device) cut to ``windows[i]`` and flipped, zero
    where the window passes the image's edge.

    One ``index_select`` over flat pixel numbers reads straight from the dataset: no copy of
    the chosen images and no padded copy first, and a constant number of launches however
    many samples (an in-memory GPU epoch is bound by launches and host work, not by bytes).
    The per-sample numbers travel in one pinned, non-blocking copy, so nothing here waits on
    the GPU.
    """
    oh, ow = out_hw
    _, h, w, c = pixels.shape
    dev, n = pixels.device, len(indices)
    packed = np.stack([np.asarray(indices, np.int64), windows.top, windows.left,
                       windows.flip.astype(np.int64)])
    image, top, left, flip = to_device(packed, dev).unbind(0)
    cols = torch.arange(ow, device=dev)
    xs = left[:, None] + torch.where(flip.bool()[:, None], ow - 1 - cols, cols)  # [N, ow]
    ys = top[:, None] + torch.arange(oh, device=dev)  # [N, oh]
    pixel = ((image[:, None, None] * h + ys.clamp(0, h - 1)[:, :, None]) * w
             + xs.clamp(0, w - 1)[:, None, :])
    out = pixels.reshape(-1, c).index_select(0, pixel.view(-1)).view(n, oh, ow, c)
    # Tested on the host (a device tensor's truth value would sync): padding is rarely hit
    # by every sample of a unit, but the mask is only built when some window leaves the image.
    if n and (windows.top.min() < 0 or windows.left.min() < 0 or (windows.top + oh).max() > h
                  or (windows.left + ow).max() > w):
        inside = (((ys >= 0) & (ys < h))[:, :, None] & ((xs >= 0) & (xs < w))[:, None, :])
        out.masked_fill_(~inside[..., None], 0)
    return out


def resize_weights(out_size: int, in_sizes: np.ndarray, width: int, flip: np.ndarray,
                   device: torch.device, shift: np.ndarray | None = None,
                   stored: np.ndarray | None = None) -> torch.Tensor:
    """float32 ``[B, out_size, width]``: row ``i`` of sample ``b`` holds the antialiased
    bilinear weights of output pixel ``i`` over input pixels ``0 .. in_sizes[b] - 1``
    (zero beyond); rows reversed where ``flip``.

    ``shift`` and ``stored`` (int ``[B]``): only pixels ``shift .. shift + stored - 1`` of
    each window are stored (the rest lie outside the image: zeros), from column 0 of the
    batch; the weights are moved onto them and zero elsewhere."""
    sizes = np.asarray(in_sizes, dtype=np.int64)
    # Enough taps for the widest tent (2·support + the two partial pixels at its ends).
    taps = int(math.ceil(2 * max(1.0, sizes.max() / out_size))) + 2
    flip = np.asarray(flip, bool)
    shift = np.zeros_like(sizes) if shift is None else np.asarray(shift, np.int64)
    stored = sizes if stored is None else np.asarray(stored, np.int64)
    packed = to_device(np.stack([sizes, flip.astype(np.int64), shift, stored]), device)
    n, flips = packed[0].double()[:, None, None], packed[1].bool()
    scale = n / out_size
    support = torch.clamp(scale, min=1.0)  # interp_size/2 = 1, widened when shrinking
    invscale = 1.0 / support
    center = scale * (torch.arange(out_size, device=device, dtype=torch.float64)[:, None] + 0.5)
    # torch truncates toward zero, then clips to the input (UpSampleKernel.cpp).
    xmin = torch.clamp(torch.trunc(center - support + 0.5), min=0)
    xmax = torch.minimum(torch.trunc(center + support + 0.5), n)
    x = xmin + torch.arange(taps, device=device, dtype=torch.float64)  # [B, out, taps]
    w = torch.clamp(1.0 - ((x - center + 0.5) * invscale).abs(), min=0.0) * (x < xmax)
    w = w / w.sum(-1, keepdim=True)
    index = x.long() - packed[2][:, None, None]  # window pixel -> stored column
    w = w * ((index >= 0) & (index < packed[3][:, None, None]))  # outside the image: zeros
    index = index.clamp(min=0, max=width - 1)
    if flip.any():  # tested on the host: a device tensor's truth value would sync
        w = torch.where(flips[:, None, None], w.flip(1), w)
        index = torch.where(flips[:, None, None], index.flip(1), index)
    dense = torch.zeros((len(sizes), out_size, width), dtype=torch.float32, device=device)
    # scatter_add: taps past the window were clipped onto its last pixel with weight 0.
    return dense.scatter_add_(2, index, w.float())


def scaled_windows(windows: Windows, scales: np.ndarray | None):
    """Windows in the coordinates of reduced decodes (``scales`` ``[B, 2]``, Pillow's draft
    mode), rounded as :func:`._augment.crop_resize` does."""
    top, left, ch, cw = windows.top, windows.left, windows.height, windows.width
    if scales is None or np.all(scales == 1.0):
        return top, left, ch, cw
    sy, sx = scales[:, 0], scales[:, 1]
    return (np.floor(top * sy).astype(np.int64), np.floor(left * sx).astype(np.int64),
            np.maximum(1, np.round(ch * sy)).astype(np.int64),
            np.maximum(1, np.round(cw * sx)).astype(np.int64))


def _device(images) -> torch.device:
    return images.device if isinstance(images, PackedImages) else images[0].device


def _subset(images, rows: np.ndarray):
    return images.select(rows) if isinstance(images, PackedImages) else [images[r] for r in rows]


def _sizes(images) -> tuple[np.ndarray, np.ndarray]:
    """int64 heights and widths of a list of ``[H, W, 3]`` tensors or of packed images."""
    if isinstance(images, PackedImages):
        return images.heights, images.widths
    return (np.array([x.shape[0] for x in images], np.int64),
            np.array([x.shape[1] for x in images], np.int64))


def crop_resize_matmul(images: list[torch.Tensor] | PackedImages, windows: Windows,
                       out_hw: tuple[int, int],
                       scales: np.ndarray | None = None, *, proc: ImageProcess | None = None,
                       out: torch.Tensor | None = None, groups: int | None = None,
                       compute_dtype: torch.dtype | None = None) -> torch.Tensor:
    """The batch's windows (uint8 ``[H_b, W_b, 3]`` images on one device, or
    :class:`~._packed.PackedImages` with none missing), resized to
    ``out_hw``, flipped, and finished as ``proc`` says (dtype, normalisation, layout; uint8
    HWC without ``proc``). Written into ``out`` when given (e.g. a staging slot).

    ``groups``: the images, sorted by window area, are cut into this many groups, each
    padded to its own largest window: random resized crops of 500×375 images padded to the
    batch's largest window do 2.2× the multiply-adds of their own windows, in 4 groups 1.4×.
    Default ``min(MAX_GROUPS, B // 16)``, at least 1 (each group costs ~80 launches).

    ``compute_dtype``: the dtype of the padded batch, the weights and the products; default
    :func:`compute_dtype_for` the images' device.
    """
    b = len(images)
    dtype = compute_dtype_for(_device(images)) if compute_dtype is None else compute_dtype
    top, left, ch, cw = scaled_windows(windows, scales)
    groups = max(1, min(MAX_GROUPS, b // 16)) if groups is None else max(1, min(groups, b))
    if groups == 1:
        res = _resize_group(images, top, left, ch, cw, windows.flip, out_hw, dtype)
        return finish(res, proc, out)
    res = None
    for rows in np.array_split(np.argsort(ch * cw, kind="stable"), groups):
        part = _resize_group(_subset(images, rows), top[rows], left[rows], ch[rows], cw[rows],
                             windows.flip[rows], out_hw, dtype)
        if res is None:
            res = part.new_empty((b, *part.shape[1:]))
        res.index_copy_(0, to_device(rows, res.device), part)
    return finish(res, proc, out)


def _resize_group(images, top, left, ch, cw, flip, out_hw, dtype=torch.float32) -> torch.Tensor:
    """``dtype`` ``[G, oh, 3, ow]``: each window's part inside its image, packed from the top-left
    corner into a zero-padded batch ``[G, Hm, 3, Wm]`` (:data:`PACKING`), then rows and
    columns as two ``bmm`` whose weights skip what each window has outside its image."""
    oh, ow = out_hw
    dev, b = _device(images), len(images)
    heights, widths = _sizes(images)
    y0, y1 = np.clip(top, 0, heights), np.clip(top + ch, 0, heights)
    x0, x1 = np.clip(left, 0, widths), np.clip(left + cw, 0, widths)
    # A window wholly outside its image (padding only) keeps one pixel, weighted zero.
    empty = (y1 <= y0) | (x1 <= x0)
    y0, x0 = np.where(empty, 0, y0), np.where(empty, 0, x0)
    y1, x1 = np.where(empty, 1, y1), np.where(empty, 1, x1)
    packer = _pack_by_gather if isinstance(images, PackedImages) else _PACKERS[PACKING]
    batch = packer(images, y0, y1, x0, x1, dtype)
    hm, wm = batch.shape[1], batch.shape[3]
    rows = resize_weights(oh, ch, hm, np.zeros(b, bool), dev, shift=y0 - top,
                          stored=np.where(empty, 0, y1 - y0)).to(dtype)
    cols = resize_weights(ow, cw, wm, flip, dev, shift=x0 - left,
                          stored=np.where(empty, 0, x1 - x0)).to(dtype)
    mid = torch.bmm(rows, batch.view(b, hm, 3 * wm)).view(b, oh * 3, wm)
    return torch.bmm(mid, cols.transpose(1, 2)).view(b, oh, 3, ow)


#: Groups a batch's windows are cut into by default (see :func:`crop_resize_matmul`): one.
#: Groups saved multiply-adds in float32 (4 groups did 1.4× a batch's own windows' work, one
#: 2.2×), but each costs ~80 launches; with float16 products the launches cost more than the
#: padding. H200, a batch of 256 (``benchmarks/results/gpu/session19-6``): 4 groups 8.1 ms of
#: host and 8.4 of GPU time, 2 groups 4.6 / 5.2, one 2.5 / 3.9.
MAX_GROUPS = 1

#: The products' dtype on CUDA (:func:`compute_dtype_for`).
CUDA_COMPUTE_DTYPE = torch.float16


def compute_dtype_for(device: torch.device) -> torch.dtype:
    """The dtype :func:`crop_resize_matmul` computes in on ``device``: float32 on the CPU
    (where half-precision products are slow), :data:`CUDA_COMPUTE_DTYPE` on CUDA."""
    return CUDA_COMPUTE_DTYPE if device.type == "cuda" else torch.float32


def _parts(images, y0, y1, x0, x1) -> list[torch.Tensor]:
    return [image[a:z, c:e] for image, a, z, c, e in
            zip(images, y0.tolist(), y1.tolist(), x0.tolist(), x1.tolist())]


def _pack_by_gather(images, y0, y1, x0, x1, dtype=torch.float32) -> torch.Tensor:
    """``dtype`` ``[B, Hm, 3, Wm]``, zero-padded: the images concatenated into one flat buffer
    (a zero pixel at its end; :class:`~._packed.PackedImages` are one already), then every
    stored pixel of every window read by one ``index_select`` (int32 pixel numbers, built by
    broadcasting a row part and a column part): about ten launches for the whole group,
    however many images."""
    dev, b = _device(images), len(images)
    heights, widths = _sizes(images)
    flat, starts, zero = _flat_images(images)
    hm, wm = int((y1 - y0).max()), int((x1 - x0).max())
    index_type = torch.int32 if zero < (1 << 31) - 1 else torch.int64
    first = starts + y0 * widths + x0  # each window's pixel 0
    packed = to_device(np.stack([first, widths, y1 - y0, x1 - x0]), dev)
    first, width, rows, cols = packed.unbind(0)
    ys, xs = torch.arange(hm, device=dev), torch.arange(wm, device=dev)
    row_start = torch.where(ys[None, :] < rows[:, None], first[:, None] + ys[None, :] * width[:, None],
                            -1)  # [B, Hm]; -1: a row past the window
    col = torch.where(xs[None, :] < cols[:, None], xs[None, :], -1)  # [B, Wm]
    index = (row_start[:, :, None] + col[:, None, :]).to(index_type)
    index.masked_fill_((row_start[:, :, None] < 0) | (col[:, None, :] < 0), zero)
    pixels = flat.index_select(0, index.view(-1)).view(b, hm, wm, 3)
    batch = torch.empty((b, hm, 3, wm), dtype=dtype, device=dev)
    return batch.copy_(pixels.permute(0, 1, 3, 2))


def _pack_by_copies(images, y0, y1, x0, x1, dtype=torch.float32) -> torch.Tensor:
    """``dtype`` ``[B, Hm, 3, Wm]``, zero-padded: one copy launch per window."""
    parts = _parts(images, y0, y1, x0, x1)
    hm, wm = max(p.shape[0] for p in parts), max(p.shape[1] for p in parts)
    batch = torch.zeros((len(parts), hm, 3, wm), dtype=dtype, device=parts[0].device)
    for i, part in enumerate(parts):
        batch[i, :part.shape[0], :, :part.shape[1]].copy_(part.permute(0, 2, 1))
    return batch


_PACKERS = {"gather": _pack_by_gather, "copies": _pack_by_copies}
#: How windows are packed into the padded batch: ``"gather"`` (one ``index_select`` from the
#: concatenated images) or ``"copies"`` (a copy per window). On the H100 a batch of 256 cost
#: 413 kernel launches with the gather and 593 with copies; a nested tensor's
#: ``to_padded_tensor``, also tried, padded and cloned each window: 1,109, the slowest
#: (``benchmarks/results/gpu/session9-8/augment_profile.log``).
PACKING = "gather"


def finish(res: torch.Tensor, proc: ImageProcess | None, out: torch.Tensor | None = None
           ) -> torch.Tensor:
    """float ``[B, oh, 3, ow]`` → the output (one kernel for a float output: the affine
    normalisation, the layout and the cast together)."""
    b, oh, _, ow = res.shape
    chw = proc is not None and proc.layout == "chw"
    view = res.permute(0, 2, 1, 3) if chw else res.permute(0, 1, 3, 2)
    shape = (b, 3, oh, ow) if chw else (b, oh, ow, 3)
    dtype = _TORCH_DTYPES[proc.dtype] if proc is not None else torch.uint8
    if out is not None and out.device != res.device:  # e.g. CPU slots, a CUDA decoder
        return out.copy_(finish(res, proc))
    dest = out if out is not None else torch.empty(shape, dtype=dtype, device=res.device)
    if dtype == torch.uint8:
        return dest.copy_(view.round_().clamp_(0, 255))
    coef = to_device(_affine(proc), res.device)
    coef = coef[:, :, None, None] if chw else coef
    return torch.addcmul(coef[1], view, coef[0], out=dest)


def crop_resize_per_image(images: list[torch.Tensor] | PackedImages, windows: Windows, out_hw: tuple[int, int],
                          scales: np.ndarray | None = None, *, proc: ImageProcess | None = None,
                          out: torch.Tensor | None = None) -> torch.Tensor:
    """The same output through :func:`._augment.crop_resize`, one image at a time, then
    ``processing.finalize`` (the previous path; faster on the CPU)."""
    from ..processing import finalize

    staged = torch.stack([
        crop_resize(image, windows[i], out_hw,
                    (1.0, 1.0) if scales is None else (float(scales[i, 0]), float(scales[i, 1])))
        for i, image in enumerate(images)])
    result = staged if proc is None else finalize(staged[:, None], proc, is_clip=False)
    return result if out is None else out.copy_(result)


def crop_resize_batch(images: list[torch.Tensor] | PackedImages, windows: Windows,
                      out_hw: tuple[int, int],
                      scales: np.ndarray | None = None, *, proc: ImageProcess | None = None,
                      out: torch.Tensor | None = None) -> torch.Tensor:
    """The per-image uint8 kernel for CPU tensors; for CUDA tensors the fused Triton kernel
    (:func:`crop_resize_fused`), or the batched matmuls where it is off or unavailable
    (:func:`cuda_resize_engine`)."""
    if _device(images).type == "cpu":
        return crop_resize_per_image(images, windows, out_hw, scales, proc=proc, out=out)
    if cuda_resize_engine() == "triton":
        try:
            return crop_resize_fused(images, windows, out_hw, scales, proc=proc, out=out)
        except TritonFailed:  # the launch failed: nothing was written, nothing is lost
            pass
    return crop_resize_matmul(images, windows, out_hw, scales, proc=proc, out=out)


#: How CUDA batches are cropped, resized, flipped and finished: ``"triton"`` (one fused
#: kernel, :mod:`._triton_resize`: no intermediates, one launch) or ``"matmul"``
#: (:func:`crop_resize_matmul`). ``"triton"`` falls back to ``"matmul"`` for the rest of the
#: process, with a warning, where Triton cannot be imported (torch's CPU and Windows wheels
#: do not bring it) or a launch fails (e.g. no C compiler for its launcher). GPU image
#: workers take this process's value.
CUDA_RESIZE = "triton"

_triton_state: dict = {"module": None, "failed": None, "ran": False}


class TritonFailed(RuntimeError):
    """The fused kernel could not be set up or compiled; the matmuls take over."""


def cuda_resize_engine() -> str:
    """``"triton"`` or ``"matmul"``: what :func:`crop_resize_batch` runs on CUDA tensors here
    (``"triton"`` where Triton imports: whether its first launch will compile is only known
    once it has run, and a failure then makes it ``"matmul"``).

    Raises:
        ValueError: :data:`CUDA_RESIZE` is neither.
    """
    if CUDA_RESIZE not in ("triton", "matmul"):
        raise ValueError(f"vidloader.images._batched.CUDA_RESIZE is {CUDA_RESIZE!r}; "
                         "use 'triton' or 'matmul'")
    if CUDA_RESIZE != "triton" or _triton_state["failed"] is not None:
        return "matmul"
    return "triton" if _triton_kernel() is not None else "matmul"


def _triton_kernel():
    """:mod:`._triton_resize`, imported once; ``None`` (and a warning) without Triton."""
    if _triton_state["module"] is None and _triton_state["failed"] is None:
        try:
            from . import _triton_resize
        except Exception as exc:  # ImportError, or a Triton too old for the kernel
            _give_up_triton(f"Triton could not be imported ({exc!r})",
                            "pip install triton (torch's Linux CUDA wheels bring it)")
            return None
        _triton_state["module"] = _triton_resize
    return _triton_state["module"]


def _give_up_triton(reason: str, fix: str) -> None:
    import warnings

    _triton_state["failed"] = reason
    warnings.warn(f"vidloader: {reason}; GPU batches are cropped and resized by batched "
                  "matmuls instead for the rest of this process (slower, and a few hundred "
                  f"MB of intermediates a batch). {fix}, or set "
                  "vidloader.images._batched.CUDA_RESIZE = 'matmul' to silence this",
                  RuntimeWarning, stacklevel=3)


def _flat_images(images) -> tuple[torch.Tensor, np.ndarray, int]:
    """Pixels ``[P + 1, 3]``, each image's first pixel (int64) and the number of a zero
    pixel (the last): a packed batch's own buffer, or a list of ``[H, W, 3]`` images
    concatenated with a zero pixel after them."""
    if isinstance(images, PackedImages):
        if images.missing.any():  # their places hold whatever the allocator left there
            raise ValueError("packed images with missing rows: select the rows that have one")
        return images.pixels, images.starts, images.zero_pixel
    heights, widths = _sizes(images)
    sizes = heights * widths
    flat = torch.cat([x.reshape(-1, 3) for x in images] + [images[0].new_zeros((1, 3))])
    return flat, np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64), int(sizes.sum())


def _affine(proc: ImageProcess | None) -> np.ndarray:
    """float32 ``[2, 3]``: the multiplier and the offset of each channel of a float output
    (from 0..255 pixels: 1/255 if normalized, then ``(x - mean) / std``)."""
    mul = np.full(3, 1 / 255 if proc is not None and proc.normalized else 1.0)
    add = np.zeros(3)
    if proc is not None and proc.mean is not None:
        add -= np.asarray(proc.mean)
    if proc is not None and proc.std is not None:
        mul, add = mul / np.asarray(proc.std), add / np.asarray(proc.std)
    return np.stack([mul, add]).astype(np.float32)


def crop_resize_fused(images: list[torch.Tensor] | PackedImages, windows: Windows,
                      out_hw: tuple[int, int],
                      scales: np.ndarray | None = None, *, proc: ImageProcess | None = None,
                      out: torch.Tensor | None = None) -> torch.Tensor:
    """:func:`crop_resize_matmul`'s output from one Triton kernel that reads each window
    where the decoder put it (:mod:`._triton_resize`), on torch's current stream; CUDA only.
    uint8 outputs are within 1 of :func:`._augment.crop_resize` (float32 throughout).

    Raises:
        TritonFailed: the kernel could not be launched (the caller falls back; so does every
            later call in this process).
    """
    pixels, starts, _ = _flat_images(images)
    heights, widths = _sizes(images)
    return _fused(pixels, starts, heights, widths, windows, out_hw, scales, proc, out)


def crop_resize_rows(pixels: torch.Tensor, indices: np.ndarray, windows: Windows,
                     out_hw: tuple[int, int], *, proc: ImageProcess | None = None,
                     out: torch.Tensor | None = None) -> torch.Tensor:
    """An in-memory dataset's rows ``indices`` of ``pixels`` (uint8 ``[M, H, W, 3]``,
    contiguous) cropped to ``windows``, resized, flipped and finished, read where they lie:
    :func:`crop_resize_fused` without gathering the rows first.

    Raises:
        TritonFailed: the kernel could not be launched (the caller falls back).
    """
    _, h, w, _ = pixels.shape
    if not pixels.is_contiguous():
        raise ValueError("crop_resize_rows reads the dataset's pixels in place: they must be "
                         "contiguous")
    starts = np.asarray(indices, np.int64) * (h * w)
    sizes = np.full(len(starts), h, np.int64), np.full(len(starts), w, np.int64)
    return _fused(pixels.view(-1, 3), starts, *sizes, windows, out_hw, None, proc, out)


def _fused(pixels, starts, heights, widths, windows, out_hw, scales, proc, out) -> torch.Tensor:
    """The fused kernel over images at ``starts`` (first pixels) of ``pixels`` ``[P, 3]``."""
    kernel = _triton_kernel()
    if kernel is None:
        raise TritonFailed(_triton_state["failed"])
    dev = pixels.device
    top, left, ch, cw = scaled_windows(windows, scales)
    params = to_device(np.stack([starts, heights, widths, top, left, ch, cw,
                                 np.asarray(windows.flip, np.int64)]).astype(np.int64), dev)
    chw = proc is not None and proc.layout == "chw"
    dtype = _TORCH_DTYPES[proc.dtype] if proc is not None else torch.uint8
    oh, ow = out_hw
    shape = (len(starts), 3, oh, ow) if chw else (len(starts), oh, ow, 3)
    dest = out if out is not None and out.device == dev else torch.empty(shape, dtype=dtype,
                                                                         device=dev)
    if tuple(dest.shape) != shape or dest.dtype != dtype:
        raise ValueError(f"out is {tuple(dest.shape)} {dest.dtype}; the batch needs {shape} {dtype}")
    s = dest.stride()
    strides = (s[0], s[2], s[3], s[1]) if chw else (s[0], s[1], s[2], s[3])
    coef = to_device(_affine(proc), dev)
    try:
        # Triton launches on the current device's current stream (the CPU: its interpreter)
        with torch.cuda.device(dev) if dev.type == "cuda" else contextlib.nullcontext():
            kernel.launch(pixels, params, coef, dest, (oh, ow), strides,
                          out_uint8=dtype == torch.uint8)
    except Exception as exc:  # raised by the launch itself (compiling, binding): nothing written
        # Even after it ran: a new specialisation (another dtype, alignment, GPU) compiles anew
        _give_up_triton(f"the fused crop/resize kernel failed to run ({exc!r})",
                        "Triton compiles its launcher with the system's C compiler (gcc): "
                        "install one, or report this error")
        raise TritonFailed(str(exc)) from exc
    _triton_state["ran"] = True
    return dest if dest is out or out is None else out.copy_(dest)
