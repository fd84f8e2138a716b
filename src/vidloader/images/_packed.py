"""A batch of decoded images packed one after another in one flat buffer.

nvImageCodec can decode a batch straight into given memory (``decode(..., images=)``). Where
the dataset's index knows every image's upright size, each file's place in one flat buffer is
known before decoding, so the batch needs no tensor per image (``torch.as_tensor`` on each
decoded image, 8 µs of the GIL apiece on the H100) and no ``torch.cat`` to pack them for the
batched augmentation, which reads its windows from the flat buffer by one gather
(:func:`~._batched.crop_resize_matmul`). Session 25 profiled the in-process GPU pool: a
quarter of its augmentation thread's time went to those tensors.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

#: Each image's first byte in ``pixels`` lies at an address that is a multiple of this many
#: bytes (a power of two; 1: images back to back). nvJPEG's hardware decoder writes straight
#: into the places given. On the H200, 256 batches of 500x375 JPEGs back to back (each place
#: 4-byte aligned) decoded at 11,679 / 12,089 / 19,593 images/s in three rounds, aligned to
#: 256 bytes at 16,589 / 18,395 / 18,421 and to 4,096 at 17,892 / 19,409 / 20,988
#: (``benchmarks/results/gpu/session27-2``; aligned from the start of a buffer that torch's
#: allocator had aligned to 512 bytes): faster aligned in two rounds of three. The loader's
#: pace did not change with it (``session27-6``). The padding is under ``ALIGN_BYTES`` pixels
#: an image, and the buffer up to ``ALIGN_BYTES`` bytes longer.
ALIGN_BYTES = 4096


def _aligned_pixels(count: int, device: torch.device) -> torch.Tensor:
    """uint8 ``[count, 3]`` whose first byte's address is a multiple of :data:`ALIGN_BYTES`
    (torch's allocators align less: 512 bytes on CUDA, 64 on the CPU)."""
    spare = ALIGN_BYTES - 1
    flat = torch.empty(3 * count + spare, dtype=torch.uint8, device=device)
    offset = -flat.data_ptr() % ALIGN_BYTES
    return flat[offset:offset + 3 * count].view(count, 3)


@dataclasses.dataclass(frozen=True, eq=False)
class PackedImages:
    """Decoded RGB images stored one after another, row-major, in ``pixels``.

    Attributes:
        pixels (torch.Tensor): uint8 ``[P + 1, 3]``; its last pixel is zero (the batched
            augmentation's padding reads it).
        starts (np.ndarray): int64 ``[B]``, each image's first pixel in ``pixels``.
        heights, widths (np.ndarray): int64 ``[B]``.
        missing (np.ndarray): bool ``[B]``, rows with no image (a file that could not be
            read or decoded); their pixels are not to be read.
    """

    pixels: torch.Tensor
    starts: np.ndarray
    heights: np.ndarray
    widths: np.ndarray
    missing: np.ndarray

    @classmethod
    def allocate(cls, sizes: np.ndarray, device: torch.device) -> PackedImages:
        """Room for images of ``sizes`` (int ``[B, 2]``: height, width), none decoded yet
        (``missing`` all false: the caller marks the rows it could not fill). Allocated on
        torch's current stream; only the zero pixel is written."""
        sizes = np.asarray(sizes, np.int64).reshape(-1, 2)
        # A pixel is 3 bytes, coprime to a power of two: a start of k pixels is aligned to
        # ALIGN_BYTES bytes when k is a multiple of ALIGN_BYTES.
        counts = sizes[:, 0] * sizes[:, 1]
        room = -(-counts // ALIGN_BYTES) * ALIGN_BYTES
        starts = np.cumsum(room) - room
        total = int(starts[-1] + counts[-1]) if len(counts) else 0
        pixels = _aligned_pixels(total + 1, device)
        pixels[total].zero_()
        return cls(pixels, starts, sizes[:, 0].copy(), sizes[:, 1].copy(),
                   np.zeros(len(sizes), bool))

    def __len__(self) -> int:
        return len(self.starts)

    @property
    def device(self) -> torch.device:
        return self.pixels.device

    @property
    def zero_pixel(self) -> int:
        """The index of the zero pixel in ``pixels``."""
        return self.pixels.shape[0] - 1

    def pointer(self, row: int) -> int:
        """The address of row ``row``'s first byte."""
        return self.pixels.data_ptr() + 3 * int(self.starts[row])

    def __getitem__(self, row: int) -> torch.Tensor | None:
        """Row ``row`` as a uint8 ``[H, W, 3]`` view (``None`` where missing)."""
        if self.missing[row]:
            return None
        start, h, w = int(self.starts[row]), int(self.heights[row]), int(self.widths[row])
        return self.pixels[start:start + h * w].view(h, w, 3)

    def fits(self, row: int, image) -> bool:
        """Whether ``image`` (anything with a ``shape``) has row ``row``'s size, ``[H, W,
        3]``; ``None`` does not."""
        return image is not None and tuple(image.shape) == (self.heights[row], self.widths[row], 3)

    def __iter__(self):
        return (self[row] for row in range(len(self)))

    def select(self, rows: np.ndarray) -> PackedImages:
        """The given rows, in that order, over the same buffer."""
        rows = np.asarray(rows, np.int64)
        return PackedImages(self.pixels, self.starts[rows], self.heights[rows], self.widths[rows],
                            self.missing[rows])
