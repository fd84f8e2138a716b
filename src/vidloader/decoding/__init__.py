"""Decoding layer: executors (cpu, nvdec) behind one contract, and ``decode_frames``.

Third-party decoders are imported lazily: importing this package never imports PyAV's
decoding machinery eagerly, and never PyNvVideoCodec. Its public names are imported on first
use, so a module below it (``_base``, the NVDEC packet side) imports no torch: separation
mode's demux workers never load it.
"""

from .._utils._lazy import lazy_exports

_HOMES = {
    "CpuExecutor": ".cpu",
    **dict.fromkeys(["DecodeStats", "DecodeTask", "DecodedFrame", "Executor", "FrameSink",
                     "GopRequest"], "._base"),
    **dict.fromkeys(["available_backends", "get_executor"], "._registry"),
    "decode_frames": "._api",
}

__all__ = [
    "CpuExecutor",
    "DecodeStats",
    "DecodeTask",
    "DecodedFrame",
    "Executor",
    "FrameSink",
    "GopRequest",
    "available_backends",
    "decode_frames",
    "get_executor",
]

__getattr__, __dir__ = lazy_exports(__name__, _HOMES)
