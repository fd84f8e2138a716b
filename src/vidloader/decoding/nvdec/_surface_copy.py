"""Copying a decoded picture out of its NVDEC surface with one ``cudaMemcpy2DAsync``.

A decoder thread copies every wanted picture from the decoder's surface (pitched: each row
padded to the surface pitch) into its row of a GOP stack before the next ``Decode`` recycles
the surface. ``dst.copy_(src[:rows, :width])`` does it with PyTorch's strided-copy kernel,
whose dispatch is Python and C++ work under the GIL for every frame, on threads that contend
for the GIL (session21-7: 17% of the decoder threads' samples on that line). The CUDA
runtime's ``cudaMemcpy2DAsync`` does the same pitched copy on the same stream; called through
``ctypes`` it costs a few microseconds and runs with the GIL released (session21-11: W1 in
stream order 2,704-2,814 frames/s against 2,169-2,685).

:func:`copy_rows` takes this path for CUDA tensors on the thread's current device, where the
process has already loaded PyTorch's CUDA runtime and :data:`ENABLED` is set. Anything else
uses ``copy_``; so does every copy after a failed call (whose error is cleared first, so that
no later PyTorch call reports it).
"""

from __future__ import annotations

import ctypes
import logging
import os
import threading

import torch

log = logging.getLogger(__name__)

#: Use ``cudaMemcpy2DAsync`` for the surface copies (``VIDLOADER_SURFACE_MEMCPY=0`` turns it
#: off, for comparisons).
ENABLED = os.environ.get("VIDLOADER_SURFACE_MEMCPY", "1") != "0"
#: ``cudaMemcpyDeviceToDevice``.
_DEVICE_TO_DEVICE = 3

_lock = threading.Lock()
_memcpy2d = None
_looked = False


def runtime_soname(cuda_version: str | None) -> str | None:
    """The soname of the CUDA runtime PyTorch was built against (``torch.version.cuda``)."""
    if not cuda_version:
        return None
    major = cuda_version.split(".")[0]
    return "libcudart.so.11.0" if major == "11" else f"libcudart.so.{major}"


def _runtime():
    """``cudaMemcpy2DAsync`` of PyTorch's CUDA runtime, if this process has loaded it (never
    a second runtime), or ``None``. Looked up once, under a lock."""
    global _memcpy2d, _looked
    if _looked:
        return _memcpy2d
    with _lock:
        if not _looked:
            _memcpy2d = _load(runtime_soname(torch.version.cuda))
            _looked = True
    return _memcpy2d


def _load(name: str | None):
    if name is None:
        return None
    try:
        lib = ctypes.CDLL(name, mode=getattr(os, "RTLD_NOLOAD", 0))
    except OSError:
        log.info("surface copies: %s is not loaded in this process; copy_ does them", name)
        return None
    fn = lib.cudaMemcpy2DAsync
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t,
                   ctypes.c_size_t, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
    clear = lib.cudaGetLastError
    clear.restype = ctypes.c_int
    clear.argtypes = []
    fn.clear_error = clear
    log.info("surface copies: cudaMemcpy2DAsync of %s", name)
    return fn


def _disable(rc: int, fn) -> None:
    """After a failed call: clear the runtime's error (PyTorch would report it at its next
    check) and take ``copy_`` from now on."""
    global _memcpy2d
    getattr(fn, "clear_error", lambda: 0)()
    _memcpy2d = None
    log.warning("surface copies: cudaMemcpy2DAsync returned %d; copy_ does them from now on", rc)


def stream_handle(device: torch.device) -> int | None:
    """The raw handle of ``device``'s current CUDA stream, or ``None`` (use ``copy_``) off CUDA
    and where ``device`` is not this thread's current device: the runtime enqueues on a stream
    of the current device's context."""
    if device.type != "cuda" or torch.cuda.current_device() != device.index:
        return None
    return torch.cuda.current_stream(device).cuda_stream


def _fits(dst: torch.Tensor, src: torch.Tensor, rows: int, width: int) -> bool:
    """Whether a raw pitched copy of ``src[:rows, :width]`` into ``dst`` stays in bounds."""
    return (dst.is_contiguous() and tuple(dst.shape) == (rows, width) and src.dim() == 2
            and src.stride(1) == 1 and src.shape[0] >= rows and src.shape[1] >= width
            and src.dtype == dst.dtype and src.device == dst.device)


def copy_rows(dst: torch.Tensor, src: torch.Tensor, rows: int, width: int,
              stream: int | None) -> None:
    """``dst[:] = src[:rows, :width]`` for a contiguous ``rows × width`` ``dst``, on the
    current stream (whose handle is ``stream``; ``None``: not CUDA, use ``copy_``)."""
    fn = _runtime() if ENABLED and stream is not None else None
    if fn is not None and _fits(dst, src, rows, width):
        size = src.element_size()
        rc = fn(dst.data_ptr(), width * size, src.data_ptr(), src.stride(0) * size,
                width * size, rows, _DEVICE_TO_DEVICE, stream)
        if rc == 0:
            return
        _disable(rc, fn)
    dst.copy_(src[:rows, :width])
