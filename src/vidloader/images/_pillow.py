"""Image files through Pillow: header probes, and decodes to upright RGB, reduced in the
JPEG decoder (draft mode) when the output needs fewer pixels.

Imports no torch, so spawned indexing processes start quickly.
"""

from __future__ import annotations

import io
import math
import os

import numpy as np

from .._utils._imports import require
from ..errors import CorruptImageError

#: EXIF orientations that turn the picture a quarter: the upright size swaps height and width.
_QUARTER_TURNS = (5, 6, 7, 8)
#: EXIF orientations that flip or turn the picture (1, absent, or no such number: as stored).
_TRANSPOSED = (2, 3, 4, 5, 6, 7, 8)
_ORIENTATION_TAG = 0x0112


def _orientation(image) -> int:
    """The image's EXIF orientation as Pillow's ``exif_transpose`` reads it: 1 to 8 for a tag
    equal to one of those numbers (an integer, or a rational or float such as 6/1), 1 when
    absent, 0 when the tag holds anything else (the picture is then kept as stored)."""
    tag = image.getexif().get(_ORIENTATION_TAG, 1)
    try:
        return int(tag) if any(tag == k for k in range(1, 9)) else 0
    except (TypeError, ValueError):  # a tag no number compares with
        return 0


def _pil():
    image = require("PIL.Image", purpose="reading image files (ImageFolder)")
    ops = require("PIL.ImageOps", purpose="reading image files (ImageFolder)")
    return image, ops


def _corrupt(path: str, exc: BaseException) -> CorruptImageError:
    return CorruptImageError(path, f"cannot decode this image ({type(exc).__name__}: {exc}); "
                             "re-encode or remove it, or pass on_error='skip'")


def _upright(width: int, height: int, orientation: int) -> tuple[int, int]:
    return (width, height) if orientation in _QUARTER_TURNS else (height, width)


def probe_image_header(path: str) -> tuple[int, int, int]:
    """Upright ``(height, width)`` and the EXIF orientation from the file's header: 1 to 8,
    1 when absent, 0 when the tag holds no such number (the size is then the stored one, as
    Pillow's ``exif_transpose`` leaves such a file).

    Raises:
        CorruptImageError: not an image Pillow can open.
    """
    image_mod, _ = _pil()
    try:
        with image_mod.open(path) as im:
            orientation = _orientation(im)
            return (*_upright(im.size[0], im.size[1], orientation), orientation)
    except (OSError, SyntaxError, ValueError, image_mod.DecompressionBombError) as exc:
        raise _corrupt(path, exc) from exc


def decode_image(path: str | os.PathLike | bytes, *, min_hw: tuple[int, int] | None = None
                 ) -> tuple[np.ndarray, tuple[float, float]]:
    """Decode to upright RGB: uint8 ``[H, W, 3]``, and its ``(sy, sx)`` scale to the full size.

    Grayscale, CMYK, palette and other modes are converted by Pillow's ``convert("RGB")``; the
    EXIF orientation is applied (``ImageOps.exif_transpose``). Without ``min_hw`` the pixels
    are exactly ``exif_transpose(Image.open(path)).convert("RGB")``.

    Args:
        path: the file, or its bytes (named ``<bytes>`` in errors).
        min_hw: the smallest upright ``(height, width)`` the caller needs; a JPEG is then
            decoded at the largest DCT reduction (1/2, 1/4, 1/8) that keeps at least this size.

    Raises:
        CorruptImageError: unreadable or truncated file.
    """
    image_mod, ops = _pil()
    source = io.BytesIO(path) if isinstance(path, bytes) else os.fspath(path)
    path = "<bytes>" if isinstance(path, bytes) else source
    try:
        with image_mod.open(source) as im:
            orientation = _orientation(im)
            full_h, full_w = _upright(im.size[0], im.size[1], orientation)
            if min_hw is not None and im.format == "JPEG":
                # min_hw is upright; draft takes the stored (width, height).
                up_h, up_w = min_hw
                need_w, need_h = (up_h, up_w) if orientation in _QUARTER_TURNS else (up_w, up_h)
                if need_w < im.size[0] // 2 and need_h < im.size[1] // 2:
                    im.draft("RGB", (need_w, need_h))
            if orientation in _TRANSPOSED:
                upright = ops.exif_transpose(im)
            else:  # exif_transpose would return a full copy (~1% of a 500x375 JPEG's decode)
                im.load()
                upright = im
            rgb = upright if upright.mode == "RGB" else upright.convert("RGB")
            array = np.array(rgb)  # writable (torch.from_numpy warns on a read-only view)
    except (OSError, SyntaxError, ValueError, image_mod.DecompressionBombError) as exc:
        raise _corrupt(path, exc) from exc
    return array, (array.shape[0] / full_h, array.shape[1] / full_w)


def needed_size(full_hw: tuple[int, int], window_hw: tuple[int, int],
                out_hw: tuple[int, int]) -> tuple[int, int]:
    """The smallest image size at which a ``window_hw`` window still has ``out_hw`` pixels."""
    return (math.ceil(full_hw[0] * out_hw[0] / window_hw[0]),
            math.ceil(full_hw[1] * out_hw[1] / window_hw[1]))


class PillowFiles:
    """A batch decoder on the CPU: :func:`decode_image` per file, as a decoder object that
    ``ImageLoader(decoder=...)`` and the GPU image pool's worker processes take (uint8
    ``[H, W, 3]`` torch tensors, ``None`` for a file Pillow cannot decode). ``device`` is
    accepted for the pools' ``make_decoder(device)`` call and must be the CPU."""

    name = "pillow"

    def __init__(self, device=None) -> None:
        if device is not None and str(device) != "cpu":
            raise ValueError(f"PillowFiles decodes on the CPU, got device={device!r}")

    def decode_files(self, paths: list[str]) -> list:
        import torch

        out = []
        for path in paths:
            try:
                out.append(torch.from_numpy(decode_image(path)[0]))
            except CorruptImageError:
                out.append(None)
        return out
