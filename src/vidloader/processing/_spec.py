"""What the model wants from each clip: NVVL's ``ProcessDesc``, as a validated dataclass.

Geometry (resize, crop, flip, frame selection) runs where the frames are decoded — the resize
inside the decoder's conversion (swscale or the NV12 kernel) — so full-size frames are never
materialised. Photometric steps (dtype, normalisation, layout) run in :func:`finalize` on the
batch's target device, after the one copy there.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Literal

import numpy as np

from .._utils._args import check_bool, check_choice, check_int, check_positive_number
from ..errors import ConfigError

_DTYPES = ("uint8", "float32", "float16")

#: Keys every batch holds besides the outputs: no output may take these names.
RESERVED_OUTPUT_NAMES = ("video_index", "frame_index", "label")


def _pair(value, name: str) -> tuple[int, int] | None:
    """``(height, width)`` from an int or a pair of ints, all > 0."""
    if value is None:
        return None
    if _is_int(value):
        value = (value, value)
    if isinstance(value, str) or not isinstance(value, Sequence) or len(value) != 2 \
            or not all(_is_int(v) and v > 0 for v in value):
        raise ConfigError(f"{name} must be (height, width) of positive ints (or one int for a "
                          f"square), got {value!r}")
    return int(value[0]), int(value[1])


def _is_int(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _floats(name: str, value) -> tuple[float, ...]:
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise ConfigError(f"{name} must be a sequence of 1 or 3 numbers, got {value!r}")
    try:
        return tuple(float(v) for v in value)
    except (TypeError, ValueError):
        raise ConfigError(f"{name} must be a sequence of 1 or 3 numbers, got {value!r}") from None


@dataclasses.dataclass(frozen=True)
class Process:
    """How to turn a decoded clip (or frame) into one output tensor.

    The decoded frame is first resized (``scale``, ``short_side`` or, when neither is given,
    straight to ``size``), then cropped to ``size`` (centre or random), then optionally
    flipped; ``index_map`` chooses which clip frames land in which output slot. Finally
    :func:`finalize` converts dtype, normalises and lays out the batch.

    Args:
        size ((int, int) | int | None): output ``(height, width)``. Default: the decoded size.
        scale ((int, int) | float | None): resize target ``(height, width)`` or factor, before
            the crop. Default: ``size`` (a plain resize) or the video's own size.
        short_side (int | None): resize so the shorter side has this length, keeping the
            aspect ratio (exclusive with ``scale``).
        crop ("center" | "random"): where the ``size`` window sits inside the resized frame.
            A random crop is drawn once per sample and shared by all its frames.
        random_flip (bool): flip horizontally with probability 0.5, once per sample.
        normalized (bool): divide by 255 (float dtypes only).
        mean, std (sequence of 3 floats | None): per-channel ``(x - mean) / std`` after
            ``normalized`` (float dtypes only).
        dtype ("uint8" | "float32" | "float16"): output dtype.
        layout (str): order of the per-sample axes, a permutation of ``"thwc"`` (``"f"`` is
            accepted for ``"t"``, as in NVVL). Single-frame batches drop ``t``.
        index_map (sequence of int | None): ``index_map[t]`` is the output slot of clip frame
            ``t`` (``-1`` drops it); the output has ``max(index_map) + 1`` frames. E.g.
            ``[-1, -1, 0]`` keeps only the third frame of a 3-frame clip.
        autorotate (bool): turn frames upright, as players show them, by the rotation of the
            video's display matrix (``VideoRecord.rotation``: a phone video shot in portrait
            is coded landscape with a 90° matrix). Sizes (``size``, ``scale``,
            ``short_side``) then apply to the upright picture. ``False``: frames as coded.
    """

    size: tuple[int, int] | int | None = None
    scale: tuple[int, int] | float | None = None
    short_side: int | None = None
    crop: Literal["center", "random"] = "center"
    random_flip: bool = False
    normalized: bool = False
    mean: Sequence[float] | None = None
    std: Sequence[float] | None = None
    dtype: Literal["uint8", "float32", "float16"] = "uint8"
    layout: str = "thwc"
    index_map: Sequence[int] | None = None
    autorotate: bool = True

    def __post_init__(self) -> None:
        for name in ("random_flip", "normalized", "autorotate"):
            check_bool(name, getattr(self, name))
        object.__setattr__(self, "size", _pair(self.size, "size"))
        self._check_resize()
        check_choice("crop", self.crop, ("center", "random"))
        check_choice("dtype", self.dtype, _DTYPES)
        self._check_normalisation()
        layout = self.layout.lower().replace("f", "t") if isinstance(self.layout, str) else None
        if layout is None or sorted(layout) != sorted("thwc"):
            raise ConfigError(f"layout must be a permutation of 'thwc' (e.g. 'cthw'), got {self.layout!r}")
        object.__setattr__(self, "layout", layout)
        if self.index_map is not None:
            imap = self.index_map
            if isinstance(imap, str) or not isinstance(imap, Sequence) or not imap \
                    or not all(_is_int(i) and i >= -1 for i in imap) or max(imap) < 0:
                raise ConfigError(f"index_map must be a sequence of ints, the output slot of each "
                                  f"clip frame (>= 0, or -1 to drop it), got {imap!r}")
            object.__setattr__(self, "index_map", tuple(int(i) for i in imap))

    def _check_resize(self) -> None:
        if isinstance(self.scale, float):
            check_positive_number("scale", self.scale, fix="a factor, or (height, width)")
        elif self.scale is not None:
            object.__setattr__(self, "scale", _pair(self.scale, "scale"))
        if self.short_side is not None:
            check_int("short_side", self.short_side, minimum=1, fix="pixels of the shorter side")
        if self.scale is not None and self.short_side is not None:
            raise ConfigError("give either scale= or short_side=, not both")

    def _check_normalisation(self) -> None:
        photometric = self.normalized or self.mean is not None or self.std is not None
        if photometric and self.dtype == "uint8":
            raise ConfigError("normalized/mean/std need dtype='float32' or 'float16'")
        for name in ("mean", "std"):
            value = getattr(self, name)
            if value is not None:
                value = _floats(name, value)
                if len(value) not in (1, 3):
                    raise ConfigError(f"{name} needs 1 or 3 values, got {value}")
                object.__setattr__(self, name, value)
        if self.std is not None and min(self.std) == 0:
            raise ConfigError("std must not contain 0")

    def frames_out(self, sequence_length: int) -> int:
        """Output frames for a clip of ``sequence_length`` frames."""
        if self.index_map is None:
            return sequence_length
        if len(self.index_map) != sequence_length:
            raise ConfigError(
                f"index_map has {len(self.index_map)} entries but clips have "
                f"{sequence_length} frames; give one slot (or -1) per clip frame"
            )
        return max(self.index_map) + 1

    def slots(self, t: int) -> int:
        """Output slot of clip frame ``t`` (``-1``: not used)."""
        return t if self.index_map is None else self.index_map[t]


def as_outputs(processing: Process | Mapping[str, Process] | None, *, size=None) -> dict[str, Process]:
    """Normalise the loader's ``processing=`` / ``size=`` arguments to ``{name: Process}``.

    A single :class:`Process` (or none) produces the output named ``"frames"``.
    """
    if processing is None:
        return {"frames": Process(size=size)}
    if size is not None:
        raise ConfigError("give size= or processing=, not both (put size inside Process)")
    if isinstance(processing, Process):
        return {"frames": processing}
    if isinstance(processing, Mapping) and processing:
        out = {}
        for name, proc in processing.items():
            if not isinstance(name, str) or name in RESERVED_OUTPUT_NAMES:
                raise ConfigError(f"processing has the output name {name!r}: names are strings "
                                  f"other than {', '.join(RESERVED_OUTPUT_NAMES)} (the batch "
                                  "holds those already); rename the output")
            if not isinstance(proc, Process):
                raise ConfigError(f"processing[{name!r}] must be a vidloader.Process, got "
                                  f"{type(proc).__name__}: processing maps output names to "
                                  "Process(...), e.g. {'frames': Process(size=224)}")
            out[str(name)] = proc
        return out
    raise ConfigError(f"processing must be a Process or a dict of them, got {processing!r}")
