"""The samplers of the ``multicam`` workloads (NVIDIA's separation example), on the library's
:class:`vidloader.MultiCameraClips`.

A sample is one (clip, frame) pair and fills one row per camera file of the clip, all at the
same frame index; the loader decodes those rows like any others and hands out batches with a
camera axis. Two orders, as in the separation example's samplers:

* ``"random"`` (``VideoClipSamplerRandom``): every sample an independent uniform draw over
  all (clip, frame) pairs: ``MultiCameraClips(replacement=True)`` as it is.
* ``"stream"`` (``VideoClipSamplerStream``): the pairs, in order, are cut into ``groups``
  contiguous runs (one per sample of a batch); batch ``i`` takes element ``i`` of each run, so
  consecutive batches walk frame by frame through the same clips (past the end of its run, a
  group walks on into the next run): ``MultiCameraClips(streams=True)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from ..errors import ConfigError
from ..sampling import MultiCameraClips, Sampler


def multicam_sampler(
    rigs: Sequence[Sequence[int]], *, order: Literal["stream", "random"] = "random",
    num_samples: int | None = None, seed: int = 0,
) -> Sampler:
    """Same frame index across the camera files of a clip, in the separation example's order.

    Args:
        rigs (sequence of sequences of int): for each clip, the index positions of its camera
            videos (all clips have the same number of cameras).
        order ("stream" | "random"): see the module docstring.
        num_samples (int | None): (clip, frame) samples per epoch; default all pairs.
        seed (int): seed of the random order.

    Raises:
        ConfigError: an unknown order, or rigs that :class:`MultiCameraClips` refuses.
    """
    if order == "random":
        return MultiCameraClips(rigs, replacement=True, num_samples=num_samples, seed=seed)
    if order == "stream":
        return MultiCameraClips(rigs, shuffle=False, streams=True, num_samples=num_samples, seed=seed)
    raise ConfigError(f"order must be 'stream' or 'random', got {order!r}")
