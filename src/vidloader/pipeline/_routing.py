"""Which videos NVDEC can decode, decided once from the index (no file opened, no CUDA)."""

from __future__ import annotations

import numpy as np

from ..errors import UnsupportedCodecError
from ..index import VideoIndex


def nvdec_refusals(index: VideoIndex) -> dict[int, str]:
    """``{video: why}`` for every video of ``index`` NVDEC cannot decode (codec, profile,
    bit depth, chroma format or size); decided once per distinct kind of stream."""
    from ..decoding.nvdec._executor import check_nvdec_supported

    verdicts: dict[tuple, str | None] = {}
    refused = {}
    for v, rec in enumerate(index):
        key = (rec.codec, rec.pix_fmt, rec.bit_depth, rec.width, rec.height)
        if key not in verdicts:
            try:
                check_nvdec_supported(rec)
                verdicts[key] = None
            except UnsupportedCodecError as exc:
                verdicts[key] = str(exc).split(": ", 1)[-1]  # the reason, without the path
        if verdicts[key] is not None:
            refused[v] = verdicts[key]
    return refused


def cpu_only_mask(index: VideoIndex, refused: dict[int, str]) -> np.ndarray:
    mask = np.zeros(len(index), dtype=bool)
    mask[list(refused)] = True
    return mask
