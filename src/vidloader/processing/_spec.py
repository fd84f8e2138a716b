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

from ..errors import ConfigError

_DTYPES = ("uint8", "float32", "float16")


def _pair(value, name: str) -> tuple[int, int] | None:
    if value is None:
        return None
    if isinstance(value, int):
        value = (value, value)
    if len(value) != 2 or min(value) <= 0:
        raise ConfigError(f"{name} must be (height, width) of positive ints, got {value!r}")
    return int(value[0]), int(value[1])


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
        if not isinstance(self.autorotate, bool):
            raise ConfigError(f"autorotate must be True or False, got {self.autorotate!r}")
        object.__setattr__(self, "size", _pair(self.size, "size"))
        if self.scale is not None and not isinstance(self.scale, float):
            object.__setattr__(self, "scale", _pair(self.scale, "scale"))
        if self.scale is not None and self.short_side is not None:
            raise ConfigError("give either scale= or short_side=, not both")
        if self.crop not in ("center", "random"):
            raise ConfigError(f"crop must be 'center' or 'random', got {self.crop!r}")
        if self.dtype not in _DTYPES:
            raise ConfigError(f"dtype must be one of {_DTYPES}, got {self.dtype!r}")
        self._check_normalisation()
        layout = self.layout.lower().replace("f", "t")
        if sorted(layout) != sorted("thwc"):
            raise ConfigError(f"layout must be a permutation of 'thwc', got {self.layout!r}")
        object.__setattr__(self, "layout", layout)
        if self.index_map is not None:
            imap = tuple(int(i) for i in self.index_map)
            if not imap or max(imap) < 0 or min(imap) < -1:
                raise ConfigError(f"index_map needs slots >= 0 (or -1 to drop), got {imap}")
            object.__setattr__(self, "index_map", imap)

    def _check_normalisation(self) -> None:
        photometric = self.normalized or self.mean is not None or self.std is not None
        if photometric and self.dtype == "uint8":
            raise ConfigError("normalized/mean/std need dtype='float32' or 'float16'")
        for name in ("mean", "std"):
            value = getattr(self, name)
            if value is not None:
                value = tuple(float(v) for v in value)
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
            if not isinstance(proc, Process):
                raise ConfigError(f"processing[{name!r}] must be a vidloader.Process, got {type(proc).__name__}")
            out[str(name)] = proc
        return out
    raise ConfigError(f"processing must be a Process or a dict of them, got {processing!r}")
