"""Copying a decoded picture out of its NVDEC surface with one ``cudaMemcpy2DAsync``.

A decoder thread copies every wanted picture from the decoder's surface (pitched: each row
padded to the surface pitch) into its row of a GOP stack before the next ``Decode`` recycles
the surface. ``dst.copy_(src[:rows, :width])`` does it with PyTorch's strided-copy kernel,
whose dispatch is Python and C++ work under the GIL for every frame, on threads that contend
for the GIL (session21-7: 17% of the decoder threads' samples on the copy line). The CUDA
runtime's ``cudaMemcpy2DAsync`` does the same pitched copy on the same stream; called through
``ctypes`` it costs a few microseconds and runs with the GIL released.

:func:`copy_rows` takes this path for CUDA tensors where the process has loaded the CUDA
runtime (PyTorch's CUDA build has) and :data:`ENABLED` is set; anything else, or a failed call,
falls back to ``copy_``.
"""

from __future__ import annotations

import ctypes
import os

import torch

#: Use ``cudaMemcpy2DAsync`` for the surface copies (``VIDLOADER_SURFACE_MEMCPY=0`` turns it
#: off, for comparisons).
ENABLED = os.environ.get("VIDLOADER_SURFACE_MEMCPY", "1") != "0"
#: ``cudaMemcpyDeviceToDevice``.
_DEVICE_TO_DEVICE = 3
#: The CUDA runtime's sonames, newest first (PyTorch loads one of them).
_SONAMES = ("libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0", "libcudart.so")

_memcpy2d = None
_looked = False


def _runtime():
    """``cudaMemcpy2DAsync`` of the CUDA runtime already loaded in this process, or ``None``."""
    global _memcpy2d, _looked
    if _looked:
        return _memcpy2d
    _looked = True
    mode = getattr(os, "RTLD_NOLOAD", 0) | getattr(os, "RTLD_GLOBAL", 0)
    for name in _SONAMES:
        try:
            lib = ctypes.CDLL(name, mode=mode)  # only one already loaded: never a second runtime
        except OSError:
            continue
        fn = lib.cudaMemcpy2DAsync
        fn.restype = ctypes.c_int
        fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t,
                       ctypes.c_size_t, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
        _memcpy2d = fn
        break
    return _memcpy2d


def stream_handle(device: torch.device) -> int | None:
    """The raw handle of ``device``'s current CUDA stream, or ``None`` (use ``copy_``) off CUDA
    and where ``device`` is not this thread's current device: the runtime enqueues on a stream
    of the current device's context."""
    if device.type != "cuda" or torch.cuda.current_device() != device.index:
        return None
    return torch.cuda.current_stream(device).cuda_stream


def copy_rows(dst: torch.Tensor, src: torch.Tensor, rows: int, width: int,
              stream: int | None) -> None:
    """``dst[:] = src[:rows, :width]`` for a contiguous ``rows × width`` ``dst``, on the
    current stream (whose handle is ``stream``; ``None``: not CUDA, use ``copy_``)."""
    fn = _runtime() if ENABLED and stream is not None else None
    if fn is not None and dst.is_contiguous() and src.dim() == 2 and src.stride(1) == 1:
        size = src.element_size()
        rc = fn(dst.data_ptr(), width * size, src.data_ptr(), src.stride(0) * size,
                width * size, rows, _DEVICE_TO_DEVICE, stream)
        if rc == 0:
            return
    dst.copy_(src[:rows, :width])
