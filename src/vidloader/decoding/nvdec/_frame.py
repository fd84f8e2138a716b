"""The NVDEC executor's :class:`DecodedFrame`: an NV12 (8-bit) or P016 (10/12-bit) picture on
the GPU, converted on demand with the stream's colours and the CPU executor's resize filter."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ...index import VideoRecord
from ...processing._nv12 import (
    chroma_siting,
    color_params,
    nv12_rows,
    nv12_to_rgb,
    nv12_to_rgb_batch,
)


def stack_surfaces(surfaces: Sequence[torch.Tensor]) -> torch.Tensor:
    """``torch.stack`` that also takes P016 (uint16) pictures: they are stacked through an int16
    view, since uint16 has only "limited support" in torch and ``cat`` may lack it on CUDA."""
    if surfaces and surfaces[0].dtype == torch.uint16:
        return torch.stack([t.view(torch.int16) for t in surfaces]).view(torch.uint16)
    return torch.stack(list(surfaces))


def _conversion(rec: VideoRecord) -> dict:
    matrix, full = color_params(rec.color_space, rec.color_range, rec.pix_fmt)
    return dict(height=rec.height, width=rec.width, matrix=matrix, full_range=full,
                chroma_loc=chroma_siting(rec.codec))


def record_stream(tensor: torch.Tensor, stream) -> None:
    """Tell the caching allocator that ``tensor`` (allocated on a decode stream) is used on
    ``stream`` too, so its memory is not reused before ``stream``'s work on it is done."""
    if tensor.is_cuda:
        tensor.record_stream(stream)


class NvdecFrame:
    """A decoded NV12 or P016 frame handed to a sink (valid only during the sink call).

    It may be a view of the decoder's output surface, which the next decode overwrites:
    convert (:meth:`to_rgb`) or copy (:meth:`planes`) inside the sink. Results never leave the
    GPU, and are safe to use on the stream that was current when the executor was called.
    """

    __slots__ = ("_nv12", "_record", "_consumer")

    def __init__(self, nv12: torch.Tensor, record: VideoRecord, consumer: torch.cuda.Stream) -> None:
        self._nv12 = nv12
        self._record = record
        self._consumer = consumer

    def to_rgb(
        self,
        size: tuple[int, int] | None = None,
        *,
        crop: tuple[int, int, int, int] | None = None,
        out: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """RGB uint8 ``H×W×3`` CUDA tensor, converted by a fused GPU kernel chain.

        Args:
            size: output ``(height, width)``; the picture (or ``crop``) is resized to it.
            crop: ``(top, left, height, width)`` window of the picture to convert.
            out: a preallocated uint8 CUDA tensor of the output shape to write into.
        """
        rgb = nv12_to_rgb(self._nv12, out_size=size, crop=crop, out=out, **_conversion(self._record))
        if out is None:
            record_stream(rgb, self._consumer)
        return rgb

    def planes(self) -> torch.Tensor:
        """The picture, a compact ``(H + ⌈H/2⌉) × W`` CUDA tensor (a private copy): uint8 NV12,
        or uint16 P016 for 10/12-bit video (samples in the high bits)."""
        rec = self._record
        rows = nv12_rows(rec.height)
        copy = self._nv12[:rows, : rec.width].clone()
        record_stream(copy, self._consumer)
        return copy

    @property
    def nv12(self) -> torch.Tensor:
        """The NV12/P016 tensor itself, without copying (valid only during the sink call)."""
        return self._nv12


#: Pictures converted per kernel chain by :meth:`NvdecFrames.to_rgb`: enough to amortise the
#: launches, few enough that the float intermediates of 1080p frames stay in the low GiBs.
RGB_CHUNK = 8


class NvdecFrames:
    """The wanted frames of one decoded GOP of one video, stacked: ``N × rows × W`` NV12
    (uint8) or P016 (uint16).

    What a GOP sink receives (:meth:`NvdecExecutor.submit_batch`): converting the GOP's frames
    in one batched kernel chain costs a few launches per GOP instead of per frame. The tensor
    is a private copy, so it stays valid after the sink returns.
    """

    __slots__ = ("_nv12", "_record", "_consumer")

    def __init__(self, nv12: torch.Tensor, record: VideoRecord, consumer: torch.cuda.Stream) -> None:
        self._nv12 = nv12
        self._record = record
        self._consumer = consumer

    def __len__(self) -> int:
        return int(self._nv12.shape[0])

    def __getitem__(self, k: int) -> NvdecFrame:
        return NvdecFrame(self._nv12[k], self._record, self._consumer)

    @property
    def nv12(self) -> torch.Tensor:
        return self._nv12

    def to_rgb(self, size: tuple[int, int] | None = None) -> torch.Tensor:
        """RGB uint8 ``N × H × W × 3`` CUDA tensor of every frame, resized to ``size``."""
        conversion = _conversion(self._record)
        parts = [nv12_to_rgb_batch(self._nv12[k : k + RGB_CHUNK], out_size=size, **conversion)
                 for k in range(0, len(self), RGB_CHUNK)]
        rgb = parts[0] if len(parts) == 1 else torch.cat(parts)
        record_stream(rgb, self._consumer)
        return rgb
