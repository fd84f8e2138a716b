"""NVDEC decoding through PyNvVideoCodec; frames never leave the GPU.

Two halves: the packet side (``_annexb``, ``_bundle``, ``_nal``, ``_gop_cache``) demuxes GOPs
into Annex-B packet bundles and runs in CPU worker processes (separation mode), never touching
CUDA; the GPU side (``_executor``, ``_decoder``, ``_pool``, ``_frame``) decodes them in the
loader's process. ``_caps`` says what the GPU's NVDEC decodes and which indexed videos it can
therefore take (:func:`nvdec_decodability`: pure, no CUDA, for routing the rest to the CPU). Importing this package imports neither PyNvVideoCodec nor ``torch.cuda``
state: the executor imports PyNvVideoCodec when it is created.
"""

from ._annexb import ContainerCache, demux_gops
from ._caps import (
    CodecCaps,
    NvdecCaps,
    needed_queries,
    nvdec_decodability,
    query_nvdec_caps,
    table_nvdec_caps,
)
from ._executor import NvdecExecutor

__all__ = [
    "CodecCaps", "ContainerCache", "NvdecCaps", "NvdecExecutor", "demux_gops", "needed_queries",
    "nvdec_decodability", "query_nvdec_caps", "table_nvdec_caps",
]
