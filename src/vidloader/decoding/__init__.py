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
    **dict.fromkeys(["BATCH_FIXES", "NVDEC_FIXES", "describe_bytes", "gpu_memory_error",
                     "gpu_memory_guard", "is_gpu_out_of_memory", "release_frames"], "._memory"),
}

__all__ = [
    "BATCH_FIXES",
    "CpuExecutor",
    "DecodeStats",
    "DecodeTask",
    "DecodedFrame",
    "Executor",
    "FrameSink",
    "GopRequest",
    "NVDEC_FIXES",
    "available_backends",
    "decode_frames",
    "describe_bytes",
    "get_executor",
    "gpu_memory_error",
    "gpu_memory_guard",
    "is_gpu_out_of_memory",
    "release_frames",
]

__getattr__, __dir__ = lazy_exports(__name__, _HOMES)
