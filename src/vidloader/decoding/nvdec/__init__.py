"""NVDEC decoding through PyNvVideoCodec; frames never leave the GPU.

Two halves: the packet side (``_annexb``, ``_bundle``, ``_nal``, ``_gop_cache``) demuxes GOPs
into Annex-B packet bundles and runs in CPU worker processes (separation mode), never touching
CUDA and never importing torch; the GPU side (``_executor``, ``_decoder``, ``_pool``,
``_frame``, and ``_status_tap``, which turns PyNvVideoCodec's printed decode errors into a
verdict per GOP) decodes them in the loader's process. ``_caps`` says what the GPU's NVDEC decodes
and which indexed videos it can therefore take (:func:`nvdec_decodability`: pure, no CUDA, for
routing the rest to the CPU). Importing this package imports nothing of either half: each
public name is imported on first use (the packet side's modules import no torch, so a demux
worker that imports ``_annexb`` stays torch-free), and the executor imports PyNvVideoCodec
when it is created.
"""

from ..._utils._lazy import lazy_exports

_HOMES = {
    **dict.fromkeys(["ContainerCache", "demux_gops"], "._annexb"),
    "concat_bundles": "._bundle",
    **dict.fromkeys(["CodecCaps", "NvdecCaps", "needed_queries", "nvdec_decodability",
                     "query_nvdec_caps", "table_nvdec_caps"], "._caps"),
    "NvdecExecutor": "._executor",
}

__all__ = [
    "CodecCaps", "ContainerCache", "NvdecCaps", "NvdecExecutor", "concat_bundles", "demux_gops",
    "needed_queries",
    "nvdec_decodability", "query_nvdec_caps", "table_nvdec_caps",
]

__getattr__, __dir__ = lazy_exports(__name__, _HOMES)
