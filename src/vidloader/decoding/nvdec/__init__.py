"""NVDEC decoding through PyNvVideoCodec; frames never leave the GPU.

Two halves: the packet side (``_annexb``, ``_bundle``, ``_nal``, ``_gop_cache``) demuxes GOPs
into Annex-B packet bundles and runs in CPU worker processes (separation mode), never touching
CUDA; the GPU side (``_executor``, ``_decoder``, ``_pool``, ``_frame``) decodes them in the
loader's process. Importing this package imports neither PyNvVideoCodec nor ``torch.cuda``
state: the executor imports PyNvVideoCodec when it is created.
"""

from ._annexb import ContainerCache, demux_gops
from ._executor import NvdecExecutor

__all__ = ["ContainerCache", "NvdecExecutor", "demux_gops"]
