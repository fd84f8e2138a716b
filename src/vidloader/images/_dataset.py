"""The image dataset contract: a sampler sees each image as a one-frame video.

The samplers (:mod:`vidloader.sampling`) read only ``len(index)`` and ``index.num_frames``, so
a dataset of N images exposes ``num_frames = ones(N)``: ``RandomFrames`` is then a keyed
permutation of the images, ``SequentialFrames`` their stored order, with the same sharding,
``sample_seeds`` and resume as video. A batch plan's ``video_indices`` are image numbers.
"""

from __future__ import annotations

import numpy as np
import torch


class ImageDataset:
    """Images with one int label each. Subclasses hold pixels in memory
    (:class:`InMemoryImages`) or name files (``ImageFolder``).

    Attributes:
        labels (np.ndarray): int64 ``[N]`` label of each image.
        classes (list[str]): class names; ``labels`` index into them.
    """

    labels: np.ndarray
    classes: list[str]

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def num_frames(self) -> np.ndarray:
        """int64 ``[N]`` ones: each image is one sample for the samplers."""
        return np.ones(len(self), dtype=np.int64)

    @property
    def in_memory(self) -> bool:
        """Whether the pixels are held in memory (no decoding)."""
        return False

    def describe(self, i: int) -> str:
        """A name for image ``i`` in messages (its path, or its position in a file)."""
        return f"image {i}"


class InMemoryImages(ImageDataset):
    """Decoded images of one size held as one uint8 ``[N, H, W, 3]`` tensor (CIFAR).

    The loader moves the tensor to its ``device`` once (150 MB for CIFAR-10's training set)
    and gathers and augments each batch there.

    Args:
        pixels (torch.Tensor | np.ndarray): uint8 ``[N, H, W, 3]``.
        labels (np.ndarray): int ``[N]``.
        classes (list[str]): class names.
        source (str): where the pixels came from, for messages.
    """

    def __init__(self, pixels, labels, classes: list[str], source: str) -> None:
        self.pixels = torch.as_tensor(pixels)
        self.labels = np.asarray(labels, dtype=np.int64)
        self.classes, self.source = list(classes), str(source)
        if self.pixels.dtype != torch.uint8 or self.pixels.ndim != 4 or self.pixels.shape[3] != 3:
            raise ValueError(f"{source}: pixels must be uint8 [N, H, W, 3], got "
                             f"{self.pixels.dtype} {tuple(self.pixels.shape)}")
        if len(self.pixels) != len(self.labels):
            raise ValueError(f"{source}: {len(self.pixels)} images but {len(self.labels)} labels")

    @property
    def in_memory(self) -> bool:
        return True

    def pixels_on(self, device: torch.device) -> torch.Tensor:
        """The pixels on ``device``, copied there once and kept (150 MB for CIFAR-10's
        training set): every epoch of every loader over this dataset reuses the copy."""
        device = torch.device(device)
        if device.type == "cpu":
            return self.pixels
        if device.type == "cuda" and device.index is None:  # "cuda" and "cuda:0": one copy
            device = torch.device("cuda", torch.cuda.current_device())
        cache = self.__dict__.setdefault("_on_device", {})
        if device not in cache:
            cache[device] = self.pixels.to(device)
        return cache[device]

    @property
    def image_size(self) -> tuple[int, int]:
        """``(height, width)`` of every image."""
        return int(self.pixels.shape[1]), int(self.pixels.shape[2])

    def describe(self, i: int) -> str:
        return f"{self.source} image {i}"

    def __repr__(self) -> str:
        h, w = self.image_size
        return (f"{type(self).__name__}({len(self)} images of {h}x{w}, "
                f"{len(self.classes)} classes, from {self.source})")
