"""Which videos NVDEC can decode: asked once, at construction, from this GPU's driver.

The driver is asked only about the kinds of stream the index holds (codec, chroma format, bit
depth: a handful of ``GetDecoderCaps`` calls, in this process, which owns the GPU); the
verdict per video is then a pure function of the index records and those caps
(:func:`~vidloader.decoding.nvdec.nvdec_decodability`), so 100k videos take well under a
second and the worker processes never touch CUDA.
"""

from __future__ import annotations

import numpy as np

from ..index import VideoIndex


def nvdec_routing(index: VideoIndex, *, gpu: int):
    """``(caps, refusals)``: this GPU's NVDEC caps for the index's kinds of stream, and
    ``{video: why}`` for every video NVDEC cannot decode (codec, profile, bit depth, chroma
    format or coded size; the reason names them in words).

    Raises:
        BackendUnavailableError: no CUDA GPU is visible, or PyNvVideoCodec is missing.
    """
    import torch

    from ..decoding.nvdec._caps import needed_queries, nvdec_decodability, query_nvdec_caps
    from ..decoding.nvdec._executor import load_pynvvideocodec

    nvc = load_pynvvideocodec()
    with torch.cuda.device(gpu):
        caps = query_nvdec_caps(nvc, gpu=gpu, queries=needed_queries(index))
    mask, reasons = nvdec_decodability(index, caps)
    return caps, {int(v): reasons[v] for v in np.flatnonzero(~mask)}


def cpu_only_mask(index: VideoIndex, refused: dict[int, str]) -> np.ndarray:
    """A bool per video: ``True`` where NVDEC refused it (the CPU decodes it instead)."""
    mask = np.zeros(len(index), dtype=bool)
    mask[list(refused)] = True
    return mask
