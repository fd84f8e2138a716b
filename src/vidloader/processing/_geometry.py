"""Per-video and per-sample geometry: resize target, crop window, flip."""

from __future__ import annotations

import dataclasses

import numpy as np

from ..errors import ConfigError
from ._spec import Process


@dataclasses.dataclass(frozen=True)
class Geometry:
    """Sizes for one (output, video) pair: decode (resize) target and output window, both
    upright, and the quarter turns (counter-clockwise) that make a decoded picture upright."""

    decode_hw: tuple[int, int]
    out_hw: tuple[int, int]
    turns: int = 0

    @property
    def coded_hw(self) -> tuple[int, int]:
        """The resize target in the picture's coded orientation (what the decoder makes)."""
        h, w = self.decode_hw
        return (w, h) if self.turns % 2 else (h, w)


def upright(images, geom: Geometry):
    """Turn ``...×H×W×C`` images (numpy or torch) decoded at ``geom.coded_hw`` upright.

    The turn is counter-clockwise by the display matrix's angle, as FFmpeg's ``autorotate``
    does (``get_rotation`` negates ``av_display_rotation_get``, then 270° is
    ``transpose=cclock``).
    """
    if geom.turns == 0:
        return images
    if isinstance(images, np.ndarray):
        return np.rot90(images, geom.turns, axes=(-3, -2))
    return images.rot90(geom.turns, dims=(images.dim() - 3, images.dim() - 2))


def quarter_turns(proc: Process, rotation: int) -> int:
    """Counter-clockwise quarter turns that make a video of display rotation ``rotation``
    (degrees, ``VideoRecord.rotation``) upright; 0 without ``autorotate`` or for an angle
    that is not a multiple of 90 (which FFmpeg's autorotate leaves alone too)."""
    if not proc.autorotate or int(rotation) % 90:
        return 0
    return int(rotation) // 90 % 4


def _resize_target(proc: Process, height: int, width: int) -> tuple[int, int]:
    if isinstance(proc.scale, float):
        return max(1, round(height * proc.scale)), max(1, round(width * proc.scale))
    if proc.scale is not None:
        return proc.scale
    if proc.short_side is not None:
        s = proc.short_side / min(height, width)
        return max(proc.short_side, round(height * s)), max(proc.short_side, round(width * s))
    if proc.size is not None:
        return proc.size
    return height, width


def geometry(proc: Process, height: int, width: int, *, rotation: int = 0, path: str = "") -> Geometry:
    """Resolve ``proc`` for a video coded at ``height × width`` pixels whose display matrix
    rotates by ``rotation`` degrees (sizes apply to the upright picture, see ``autorotate``)."""
    turns = quarter_turns(proc, rotation)
    if turns % 2:
        height, width = width, height
    decode_hw = _resize_target(proc, height, width)
    out_hw = proc.size or decode_hw
    if out_hw[0] > decode_hw[0] or out_hw[1] > decode_hw[1]:
        raise ConfigError(
            f"{path}: crop size {out_hw} is larger than the resized frame {decode_hw}; "
            "lower size= or raise scale=/short_side="
        )
    return Geometry(decode_hw, out_hw, turns)


@dataclasses.dataclass(frozen=True)
class SampleTransform:
    """The random choices of one sample, shared by all its frames."""

    top: int
    left: int
    flip: bool


def sample_transform(proc: Process, geom: Geometry, seed: int) -> SampleTransform:
    """Crop origin and flip for a sample, drawn from its seed (deterministic on resume)."""
    (dh, dw), (oh, ow) = geom.decode_hw, geom.out_hw
    if proc.crop != "random" and not proc.random_flip:
        # Nothing to draw: a generator costs ~15 us, per sample of every batch (main thread).
        return SampleTransform((dh - oh) // 2, (dw - ow) // 2, False)
    rng = np.random.default_rng(int(seed))
    if proc.crop == "random":
        top = int(rng.integers(0, dh - oh + 1))
        left = int(rng.integers(0, dw - ow + 1))
    else:
        top, left = (dh - oh) // 2, (dw - ow) // 2
    flip = bool(proc.random_flip and rng.random() < 0.5)
    return SampleTransform(top, left, flip)


def apply_window(image, geom: Geometry, tf: SampleTransform):
    """Crop (and flip) an ``H×W×C`` image resized to ``geom.decode_hw``, or every frame of
    ``…×H×W×C`` frames of one sample (one window), as one slice; numpy or torch."""
    oh, ow = geom.out_hw
    out = image[..., tf.top : tf.top + oh, tf.left : tf.left + ow, :]
    if tf.flip:
        out = out[..., ::-1, :] if isinstance(out, np.ndarray) else out.flip(-2)
    return out
