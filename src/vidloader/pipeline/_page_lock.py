"""Host memory page-locked for CUDA (``cudaHostRegister``), for memory that is not torch's:
the GPU image pool's reader slabs (``_image_decode.PIN_READ_SLABS``)."""

from __future__ import annotations

import threading
import warnings

import torch


def pin_host_memory(array, device: torch.device, *, what: str = "", off: str = ""):
    """Page-lock ``array``'s memory for CUDA on ``device``; a callable that unlocks it, or
    ``None`` where CUDA refused: a warning names ``what`` was to be locked, CUDA's error and
    ``off``, the setting that skips the try; the memory stays pageable, which works, slower.
    Unlock only once the GPU is done with the memory."""
    if device.index is None:  # "cuda": the caller's current device, not the new thread's (0)
        device = torch.device("cuda", torch.cuda.current_device())
    pointer, size = array.ctypes.data, array.nbytes
    error = _cudart_on_own_thread(device, "cudaHostRegister", pointer, size, 0)
    if error != 0:
        warnings.warn(f"vidloader: CUDA could not page-lock {what} {size:,} bytes "
                      f"(cudaHostRegister: error {error}); they stay pageable"
                      + (f". Set {off} to skip the try." if off else "."),
                      RuntimeWarning, stacklevel=2)
        return None
    return lambda: _cudart_on_own_thread(device, "cudaHostUnregister", pointer)


def _cudart_on_own_thread(device: torch.device, name: str, *args) -> int:
    """CUDA runtime call ``name(*args)`` with ``device`` current, on a thread made for it; its
    error number (-1 where it raised). A failed call leaves its error pending on the thread
    that made it, where the next kernel launch would raise it (torch's cudart has no
    ``cudaGetLastError`` to clear it): here that thread ends with the call."""
    result = []

    def call() -> None:
        with torch.cuda.device(device):
            result.append(int(getattr(torch.cuda.cudart(), name)(*args)))
    thread = threading.Thread(target=call, name=f"vidloader-{name}")
    thread.start()
    thread.join()
    return result[0] if result else -1
