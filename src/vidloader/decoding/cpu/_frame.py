"""The CPU executor's :class:`DecodedFrame`: a PyAV frame plus the executor's swscale context."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np


@functools.lru_cache(maxsize=32)
def swscale_flags(interpolation: str) -> Any:
    """The swscale flags a resize runs with: the ``interpolation`` algorithm plus
    ``FULL_CHR_H_INT``, so chroma is interpolated to every output pixel (swscale's default for
    RGB output computes chroma for every second pixel only, and rounds RGB about one code
    value low). With ``BILINEAR`` this is the filter the NVDEC path reproduces on the GPU
    (:mod:`vidloader.processing._resample`): a model cannot tell the executors apart."""
    from av.video.reformatter import Interpolation

    return Interpolation[interpolation] | Interpolation.FULL_CHR_H_INT


class CpuFrame:
    """A decoded ``av.VideoFrame`` handed to a sink (valid only during the sink call).

    Conversion happens only here, for delivered frames: swscale converts to RGB and scales
    straight to the output size in one pass (the resize pushdown).
    """

    __slots__ = ("_frame", "_reformatter", "_interpolation", "_threads")

    def __init__(self, frame: Any, reformatter: Any, interpolation: str, threads: int) -> None:
        self._frame = frame
        self._reformatter = reformatter
        self._interpolation = interpolation
        self._threads = threads

    @property
    def av_frame(self) -> Any:
        """The underlying ``av.VideoFrame`` (for callers that want PyAV directly)."""
        return self._frame

    def to_rgb(self, size: tuple[int, int] | None = None) -> np.ndarray:
        """RGB uint8 ``H×W×3``; with ``size = (height, width)``, scaled by swscale on the way
        (with :func:`swscale_flags`).

        Without ``size`` the conversion uses PyAV's default flags, so the result is bit-exact
        with ``frame.to_ndarray(format="rgb24")`` whatever ``interpolation`` is (swscale's
        unscaled path differs for some flags, e.g. ``FAST_BILINEAR`` on yuv444p).
        """
        if size is None:
            rgb = self._reformatter.reformat(self._frame, format="rgb24", threads=self._threads)
        else:
            height, width = size
            rgb = self._reformatter.reformat(
                self._frame,
                width=int(width),
                height=int(height),
                format="rgb24",
                interpolation=swscale_flags(self._interpolation),
                threads=self._threads,
            )
        return rgb.to_ndarray()

    def planes(self) -> list[np.ndarray]:
        """The decoder's native planes, unconverted, as a list of 2-D arrays (copies).

        One array per plane (``Y, U, V`` for ``yuv420p``/``yuv444p``), row padding removed:
        shape ``(plane_height, plane_width * components_in_plane)``; ``uint8`` for 8-bit
        formats, ``uint16`` in native byte order for deeper ones (``yuv420p10le`` …).
        """
        frame = self._frame
        components = frame.format.components
        out = []
        for i, plane in enumerate(frame.planes):
            bits = [c.bits for c in components if c.plane == i] or [8]
            row_bytes = plane.width * sum((b + 7) // 8 for b in bits)
            rows = np.frombuffer(plane, np.uint8)[: plane.height * plane.line_size]
            arr = np.ascontiguousarray(rows.reshape(plane.height, plane.line_size)[:, :row_bytes])
            out.append(arr.view(np.uint16) if max(bits) > 8 else arr)
        return out
