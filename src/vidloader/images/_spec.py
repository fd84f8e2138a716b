"""What the model wants from each image: a validated dataclass, the image twin of ``Process``.

Geometry (crop window, resize, flip) is drawn per sample from the sample's seed and applied by
:mod:`._augment` in torch, so the same code runs on CPU worker tensors and on GPU batches.
Photometric steps (dtype, normalisation, layout) run in ``processing.finalize`` on the batch's
device, after the one copy there.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Literal

from ..errors import ConfigError

Crop = Literal["none", "center", "random", "random_resized"]
CROPS: tuple[str, ...] = ("none", "center", "random", "random_resized")
_DTYPES = ("uint8", "float32", "float16")
_LAYOUTS = ("hwc", "chw")


def _pair(value, name: str) -> tuple[int, int] | None:
    if value is None:
        return None
    if isinstance(value, int):
        value = (value, value)
    if len(value) != 2 or min(value) <= 0:
        raise ConfigError(f"{name} must be (height, width) of positive ints, got {value!r}")
    return int(value[0]), int(value[1])


def _range(value, name: str, low: float) -> tuple[float, float]:
    lo, hi = (float(v) for v in value)
    if not low < lo <= hi:
        raise ConfigError(f"{name} must be (min, max) with {low} < min <= max, got {value!r}")
    return lo, hi


@dataclasses.dataclass(frozen=True)
class ImageProcess:
    """How to turn a decoded image into one row of the ``"images"`` output.

    Args:
        size ((int, int) | int | None): output ``(height, width)``. Default: the stored size
            (every image of the dataset must then have the same size, as CIFAR's do).
        crop ("none" | "center" | "random" | "random_resized"): the window of the image that
            becomes the output. ``"none"``: the whole image, resized to ``size``;
            ``"center"``: the largest centred window with the output's aspect ratio, times
            ``center_fraction``, resized (ImageNet evaluation: ``center_fraction=0.875``);
            ``"random"``: a window of exactly ``size`` at a uniform random place in the image
            padded by ``padding`` zero pixels on each side (CIFAR's ``RandomCrop(32,
            padding=4)``), no resize; ``"random_resized"``: torchvision's
            ``RandomResizedCrop(size, scale, ratio)``.
        padding (int): zero pixels added around the image for ``crop="random"``; default 0.
        scale ((float, float)): area range of ``"random_resized"``; default (0.08, 1.0).
        ratio ((float, float)): aspect-ratio range of ``"random_resized"``; default (3/4, 4/3).
        center_fraction (float): share of the centred window kept by ``"center"``; default 1.
        random_flip (bool): flip horizontally with probability 0.5 per sample; default False.
        normalized (bool): divide by 255 (float dtypes only); default False.
        mean, std (sequence of 3 floats | None): per-channel ``(x - mean) / std`` after
            ``normalized`` (float dtypes only).
        dtype ("uint8" | "float32" | "float16"): output dtype; default ``"uint8"``.
        layout ("hwc" | "chw"): per-sample axes: ``"chw"`` gives NCHW batches.

    .. note:: Resizing is bilinear with antialiasing (``torch.nn.functional.interpolate``).
       Windows are drawn from the sampler's per-sample seed, so a resumed epoch, any
       ``num_workers`` and the CPU and GPU paths all crop the same windows.
    """

    size: tuple[int, int] | int | None = None
    crop: Crop = "none"
    padding: int = 0
    scale: tuple[float, float] = (0.08, 1.0)
    ratio: tuple[float, float] = (3 / 4, 4 / 3)
    center_fraction: float = 1.0
    random_flip: bool = False
    normalized: bool = False
    mean: Sequence[float] | None = None
    std: Sequence[float] | None = None
    dtype: Literal["uint8", "float32", "float16"] = "uint8"
    layout: Literal["hwc", "chw"] = "hwc"

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "size", _pair(self.size, "size"))
        if self.crop not in CROPS:
            raise ConfigError(f"crop must be one of {CROPS}, got {self.crop!r}")
        if not isinstance(self.padding, int) or self.padding < 0:
            raise ConfigError(f"padding must be an int >= 0, got {self.padding!r}")
        if self.padding and self.crop != "random":
            raise ConfigError(f"padding={self.padding} applies to crop='random' only, "
                              f"got crop={self.crop!r}")
        set_(self, "scale", _range(self.scale, "scale", 0.0))
        set_(self, "ratio", _range(self.ratio, "ratio", 0.0))
        if not 0.0 < float(self.center_fraction) <= 1.0:
            raise ConfigError(f"center_fraction must be in (0, 1], got {self.center_fraction!r}")
        if self.dtype not in _DTYPES:
            raise ConfigError(f"dtype must be one of {_DTYPES}, got {self.dtype!r}")
        if self.layout not in _LAYOUTS:
            raise ConfigError(f"layout must be 'hwc' or 'chw', got {self.layout!r}")
        for name in ("mean", "std"):
            value = getattr(self, name)
            if value is not None:
                if len(value) != 3:
                    raise ConfigError(f"{name} must hold 3 floats (R, G, B), got {value!r}")
                set_(self, name, tuple(float(v) for v in value))
        if self.dtype == "uint8" and (self.normalized or self.mean or self.std):
            raise ConfigError("normalized, mean and std need a float dtype: pass "
                              "dtype='float32' or 'float16'")

    @property
    def is_identity(self) -> bool:
        """Whether the output is the stored pixels (no window, resize or flip)."""
        return self.size is None and self.crop == "none" and not self.random_flip

    def out_hw(self, height: int, width: int) -> tuple[int, int]:
        """Output ``(height, width)`` for an image of this (upright) size."""
        return self.size if self.size is not None else (height, width)
