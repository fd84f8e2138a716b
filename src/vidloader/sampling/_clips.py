"""Clip sampler with NVVL / DALI semantics: fixed-length, strided frame sequences."""

from __future__ import annotations

import numpy as np

from .._utils._args import check_positive_number
from ..errors import ConfigError
from ._checks import check_bool, check_int
from ._epoch import Mode, SpaceSampler
from ._space import ClipShape


class Clips(SpaceSampler):
    """Clips of ``sequence_length`` frames, ``stride`` apart, starting every ``step`` frames.

    A clip starting at frame ``s`` covers ``s, s + stride, ..., s + stride * (sequence_length
    - 1)``. Every start with ``s % step == 0`` whose last frame is inside the video is a sample
    (NVVL's ``VideoDataset``, DALI's ``readers.video``): no clip crosses the end of a video, and
    a video shorter than ``stride * (sequence_length - 1) + 1`` frames has no clip. Two
    100-frame videos with ``sequence_length=5`` hold 96 clips each, 192 in all; with
    ``shuffle=False`` samples 0..95 are the first video's, 96..191 the second's.

    ``Clips(sequence_length=1)`` enumerates exactly the frames, in the same order as
    :class:`RandomFrames` with the same seed (both are views of one sample space).

    ``first_seconds`` keeps every clip inside the first seconds of its video (frames whose
    timestamp, from the video's first frame, is below it), as loaders that decode only the
    head of each video do (SPDL's Kinetics benchmark: the first 0.5 s). Videos whose head is
    shorter than a clip hold none.

    Batches hold ``frame_indices`` of shape ``[B, sequence_length]`` (``is_clip=True``).

    Args:
        sequence_length (int): frames per clip.
        stride (int): distance in frames between consecutive frames of a clip.
        step (int): distance in frames between consecutive clip starts in a video.
        shuffle (bool): a keyed random permutation of all clips each epoch; ``False``: clips
            in order, video by video.
        replacement (bool): i.i.d. uniform draws over all clips (needs ``shuffle=True``).
        num_samples (int | None): clips per epoch over all ranks; default: all clips.
        seed (int): seed of the order and of the per-sample seeds.
        first_seconds (float | None): only frames in the first ``first_seconds`` of each
            video are sampled; default: all frames.

    Raises:
        ConfigError: a bad option; at ``plan_epoch``, an index where no video holds a clip.
    """

    is_clip = True

    def __init__(
        self, *, sequence_length: int, stride: int = 1, step: int = 1, shuffle: bool = True,
        replacement: bool = False, num_samples: int | None = None, seed: int = 0,
        first_seconds: float | None = None,
    ) -> None:
        super().__init__(num_samples=num_samples, seed=seed)
        self.sequence_length = check_int("sequence_length", sequence_length, minimum=1)
        self.stride = check_int("stride", stride, minimum=1)
        self.step = check_int("step", step, minimum=1)
        self.shuffle = check_bool("shuffle", shuffle)
        self.replacement = check_bool("replacement", replacement)
        if self.replacement and not self.shuffle:
            raise ConfigError(
                f"{type(self).__name__}(replacement=True, shuffle=False): draws with replacement "
                "are random; pass shuffle=True, or replacement=False for clips in order"
            )
        if first_seconds is not None:
            first_seconds = check_positive_number(
                "first_seconds", first_seconds, fix="pass the seconds at the head of each video "
                "that clips may come from (e.g. 0.5), or None for whole videos")
        self.first_seconds = first_seconds

    def _clip_shape(self) -> ClipShape:
        return ClipShape(self.sequence_length, self.stride, self.step)

    def _frames(self, index) -> np.ndarray:
        """With ``first_seconds``, each video's frames timed before it (its timestamps from
        its first frame); otherwise all of them."""
        if self.first_seconds is None:
            return index.num_frames
        if not hasattr(index, "frames_before"):  # a stand-in index of frame counts only
            raise ConfigError(
                f"{self!r} needs each video's timestamps, and {type(index).__name__} gives only "
                "frame counts: pass a vidloader.VideoIndex, or first_seconds=None")
        return index.frames_before(self.first_seconds)  # computed once, kept by the index

    def sample_space(self, index):
        try:
            return super().sample_space(index)
        except ConfigError as exc:
            if self.first_seconds is None:
                raise
            raise ConfigError(f"{exc}. With first_seconds={self.first_seconds}, only frames in "
                              "each video's first seconds count: raise first_seconds, or shorten "
                              "the clip (sequence_length, stride)") from None

    def config(self) -> dict:
        config = super().config()
        if config.get("first_seconds") is None:  # as before it existed: older states resume
            config.pop("first_seconds", None)
        return config

    def _mode(self) -> Mode:
        if self.replacement:
            return "replacement"
        return "shuffle" if self.shuffle else "sequential"
