"""CPU decoding: FFmpeg through PyAV, resizing inside swscale (the resize pushdown)."""

from ._executor import CpuExecutor, media_error

__all__ = ["CpuExecutor", "media_error"]
