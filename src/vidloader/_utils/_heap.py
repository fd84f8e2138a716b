"""Giving a worker's freed heap back to the system between units of work.

A demux worker builds each unit's packets in its own memory, copies them into a shared-memory
segment for the GPU process, then frees them. glibc's allocator keeps freed blocks that lie
between live ones for the process's next allocations, so a worker's resident memory stays at
its largest unit's size: 16 NVDEC demux workers held 3.9-4.1 GiB (PSS) on uniform random 1080p
frames against 0.7 GiB on sequential reading (``benchmarks/results/gpu/session17-6``).
``malloc_trim(0)`` returns those free pages to the system. Elsewhere (musl, macOS) it is a
no-op.
"""

from __future__ import annotations

import ctypes

_TRIM = None  # glibc's malloc_trim once looked up; False where there is none


def trim_heap() -> bool:
    """Return the free pages of the C heap to the system (glibc's ``malloc_trim(0)``).
    ``True`` if glibc did (or could have: it says whether any memory was released), ``False``
    where the C library has no ``malloc_trim``."""
    global _TRIM
    if _TRIM is None:
        _TRIM = _lookup()
    if not _TRIM:
        return False
    _TRIM(0)
    return True


def _lookup():
    try:  # the C library already loaded into the process (no ldconfig subprocess)
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return False
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim
