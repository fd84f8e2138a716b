"""Single-frame samplers: uniform random frames over the whole dataset, and stream order."""

from __future__ import annotations

from ._checks import check_bool
from ._epoch import Mode, SpaceSampler


class RandomFrames(SpaceSampler):
    """Uniform random frames across the whole dataset: every *frame* equally likely, so a
    video's share of an epoch is proportional to its length (not one share per video).

    Without replacement an epoch is a keyed pseudo-random permutation of all frames (each frame
    exactly once), truncated to ``num_samples`` if given. With replacement every sample is an
    independent uniform draw over all frames. Either way sample number ``p`` of the epoch is a
    pure function of ``(seed, epoch, p)``, so the stream is the same for any number of
    workers, ranks or batch size.

    Batches hold ``frame_indices`` of shape ``[B, 1]`` (``is_clip=False``).

    Args:
        replacement (bool): draw i.i.d. (a frame may repeat within an epoch) instead of a
            permutation.
        num_samples (int | None): samples per epoch over all ranks; default: all frames.
            Without replacement it may not exceed the number of frames.
        seed (int): seed of the order and of the per-sample seeds.
    """

    is_clip = False

    def __init__(
        self, *, replacement: bool = False, num_samples: int | None = None, seed: int = 0
    ) -> None:
        super().__init__(num_samples=num_samples, seed=seed)
        self.replacement = check_bool("replacement", replacement)

    def _mode(self) -> Mode:
        return "replacement" if self.replacement else "shuffle"


class SequentialFrames(SpaceSampler):
    """All frames in stream order: video 0 frames ``0 .. n-1``, then video 1, and so on.

    Every epoch has the same order; only ``sample_seeds`` (for random processing) change with
    the epoch. Batches hold ``frame_indices`` of shape ``[B, 1]`` (``is_clip=False``).

    Args:
        num_samples (int | None): take only the first ``num_samples`` frames of the stream;
            default: all frames.
        seed (int): seed of the per-sample seeds.
    """

    is_clip = False

    def __init__(self, *, num_samples: int | None = None, seed: int = 0) -> None:
        super().__init__(num_samples=num_samples, seed=seed)

    def _mode(self) -> Mode:
        return "sequential"
