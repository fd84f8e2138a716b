"""Decoding layer: executors (cpu, nvdec) behind one contract, and ``decode_frames``.

Third-party decoders are imported lazily: importing this package never imports PyAV's
decoding machinery eagerly, and never PyNvVideoCodec.
"""

from ._api import decode_frames
from ._base import DecodedFrame, DecodeStats, DecodeTask, Executor, FrameSink, GopRequest
from ._registry import available_backends, get_executor
from .cpu import CpuExecutor

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
