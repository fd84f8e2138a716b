"""GPU memory exhaustion, recognised and named: :class:`~vidloader.errors.GpuMemoryError`
from what torch and PyNvVideoCodec raise when an allocation on the GPU fails.

GPU memory running out is not a bad file. Under ``on_error="skip"`` a per-file skip would
drop every file in turn while the other tensor holds the memory, so the loader raises it
whatever ``on_error`` says, naming what was being allocated, how much was free and the fixes.

What is recognised:

* torch's ``torch.cuda.OutOfMemoryError`` (a ``RuntimeError``), from staging slots, frame
  copies and colour conversion;
* PyNvVideoCodec's own exception types, by their text: its driver calls say ``CUDA driver
  API error CUDA_ERROR_OUT_OF_MEMORY``, its NVDEC calls ``cuvidCreateDecoder(...) returned
  error 2`` (``CUresult`` 2 is ``CUDA_ERROR_OUT_OF_MEMORY``), the CUDA runtime ``out of
  memory`` / ``cudaErrorMemoryAllocation``.

This module imports no torch: the decoding package's lower modules run in demux workers that
never load it (a torch error can only exist where torch is imported, so ``sys.modules`` is
enough to recognise one).
"""

from __future__ import annotations

import contextlib
import re
import sys
from collections.abc import Iterator

from ..errors import GpuMemoryError, VidloaderError

#: The text of an out-of-memory error from the CUDA driver, NVDEC or the runtime.
_OOM_TEXT = re.compile(
    r"out of memory|CUDA_ERROR_OUT_OF_MEMORY|cudaErrorMemoryAllocation|returned error 2\b",
    re.IGNORECASE,
)

#: What frees GPU memory for any loader that puts batches on a GPU.
BATCH_FIXES = ("free (del) other tensors on that GPU and call torch.cuda.empty_cache(), or "
               "lower batch_size (or the output size)")
#: What frees GPU memory for the NVDEC path, named in its :class:`GpuMemoryError`.
NVDEC_FIXES = (
    f"{BATCH_FIXES}, or give the loader a memory_budget (e.g. memory_budget='3GiB': it plans "
    "its staging, decoders and conversion to fit), or queue fewer units on NVDEC "
    "(nvdec_options={'units_decoding': 1}) and use fewer decoders (nvdec_decoders=4), or "
    "decode on the CPU (backend='cpu')"
)

#: Characters of the original error kept in the message (torch's runs to several lines of
#: allocator statistics; the whole of it stays in the chained ``__cause__``).
_CAUSE_CHARS = 240


def is_gpu_out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` says the GPU ran out of memory (torch's ``OutOfMemoryError``, or a
    PyNvVideoCodec/CUDA error whose text says so). vidloader's own typed errors, a
    :class:`GpuMemoryError` included, are never taken for one: they already say what they are."""
    if isinstance(exc, VidloaderError):
        return False
    torch = sys.modules.get("torch")
    oom = getattr(getattr(torch, "cuda", None), "OutOfMemoryError", None)
    if oom is not None and isinstance(exc, oom):
        return True
    return bool(_OOM_TEXT.search(str(exc)))


def gpu_memory_error(exc: BaseException, what: str, device=None, *,
                     fixes: str = NVDEC_FIXES) -> GpuMemoryError:
    """The :class:`GpuMemoryError` for ``exc``, an allocation of ``what`` that failed on
    ``device`` (a CUDA index, ``torch.device`` or ``"cuda:N"``; ``None``: the current one);
    ``fixes``: what frees memory (default: the NVDEC path's). Raise it ``from exc``. Reads
    the free memory now (``torch.cuda.mem_get_info``)."""
    name = _device_name(device)
    free, total = _mem_info(device)
    room = (f"{describe_bytes(free)} free of {describe_bytes(total)}" if free is not None
            else "free memory unknown")
    cause = " ".join(str(exc).split()) or type(exc).__name__
    if len(cause) > _CAUSE_CHARS:
        cause = cause[:_CAUSE_CHARS] + "..."
    return GpuMemoryError(
        f"GPU memory ran out on {name or 'the GPU'} while allocating {what} ({room}; "
        f"{type(exc).__name__}: {cause}). Running out of GPU memory is not a bad file, so it "
        f"is raised even with on_error='skip'. To fix it, {fixes}; the loader can be "
        "iterated again once memory is free.",
        what=what, device=name, free_bytes=free, total_bytes=total,
    )


@contextlib.contextmanager
def gpu_memory_guard(what: str, device=None, *, fixes: str = NVDEC_FIXES) -> Iterator[None]:
    """Turn an out-of-memory error raised inside the block (:func:`is_gpu_out_of_memory`)
    into a :class:`GpuMemoryError` naming ``what`` (see :func:`gpu_memory_error`); anything
    else passes unchanged."""
    try:
        yield
    except Exception as exc:
        if not is_gpu_out_of_memory(exc):
            raise
        raise gpu_memory_error(exc, what, device, fixes=fixes) from exc


def describe_bytes(n: int | None) -> str:
    """``n`` bytes for a message: MiB, or GiB from 10 GiB up (``"?"`` for ``None``)."""
    if n is None:
        return "?"
    return f"{n / 2**30:.1f} GiB" if n >= 10 * 2**30 else f"{n / 2**20:.1f} MiB"


def _device_index(device) -> int | None:
    """The CUDA index of an int, a ``torch.device`` or ``"cuda:N"``; ``None`` otherwise."""
    if device is None or isinstance(device, bool):
        return None
    if isinstance(device, int):
        return device
    text = str(device)  # a torch.device prints as "cuda:N" too
    if text.startswith("cuda:") and text[5:].isdigit():
        return int(text[5:])
    return None


def _device_name(device) -> str | None:
    index = _device_index(device)
    if index is None:
        torch = sys.modules.get("torch")
        try:
            index = torch.cuda.current_device() if torch is not None else None
        except Exception:  # no CUDA here (a CPU test of the stand-in), or a broken context
            index = None
    return None if index is None else f"cuda:{index}"


def _mem_info(device) -> tuple[int | None, int | None]:
    """``torch.cuda.mem_get_info`` of ``device``, or ``(None, None)`` when it cannot be read."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None, None
    try:
        index = _device_index(device)
        free, total = torch.cuda.mem_get_info() if index is None else torch.cuda.mem_get_info(index)
        return int(free), int(total)
    except Exception:  # no CUDA (CPU tests), or the driver cannot say
        return None, None


def release_frames(exc: BaseException) -> None:
    """Drop the local variables of the finished frames in ``exc``'s tracebacks (its causes'
    too). A traceback keeps every frame it passed through alive, with their locals: after a
    :class:`GpuMemoryError` those hold staging slots, decoded frames and decoders, so the
    memory would stay taken for as long as the caller keeps the exception (``pytest.raises``,
    a logged error, ``sys.last_value``), and the retry it asks for would fail again. Frames
    still running are left alone (``frame.clear`` refuses them)."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        tb = exc.__traceback__
        while tb is not None:
            with contextlib.suppress(RuntimeError):  # a frame still executing
                tb.tb_frame.clear()
            tb = tb.tb_next
        exc = exc.__cause__ or exc.__context__
