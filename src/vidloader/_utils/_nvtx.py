"""NVTX ranges for Nsight Systems timelines, switched on per loader and free when off.

A :class:`Ranges` is handed to each piece of code that does timed work (demux, decode,
conversion, host→device copy); ``with ranges("vidloader.decode", path):`` opens a range named
``"vidloader.decode <path>"`` on the calling thread. When off it returns :data:`OFF`, one
module-level no-op context, so the cost is a call and a truth test: no string is formatted
and torch's NVTX binding is never touched.

NVTX only marks the calling thread's timeline; it creates no CUDA context, so CPU worker
processes may emit ranges too (``tests/test_nvtx.py`` checks this on the GPU). torch is
imported when a range is first opened, not with this module: separation mode's demux workers
import it and stay torch-free unless ranges are on.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable

from ..errors import ConfigError

#: Environment variable that switches ranges on for every loader of the process (``1``) when
#: the loader's ``nvtx`` argument is left at ``None``.
NVTX_ENV = "VIDLOADER_NVTX"

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("", "0", "false", "no", "off")


class _Off:
    """The context of a range that is off: enters and leaves without doing anything."""

    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc) -> None:
        return None


#: The one no-op context every disabled range returns.
OFF = _Off()


class _Range:
    """One NVTX push/pop pair on the calling thread."""

    __slots__ = ("message",)

    def __init__(self, message: str) -> None:
        self.message = message

    def __enter__(self) -> None:
        # Looked up at each call, not bound at import: tests record names by patching it.
        _torch().cuda.nvtx.range_push(self.message)

    def __exit__(self, *exc) -> None:
        _torch().cuda.nvtx.range_pop()


def _torch():
    """torch, imported on first use (a module look-up afterwards)."""
    torch = sys.modules.get("torch")
    if torch is None:
        import torch
    return torch


class Ranges:
    """Opens NVTX ranges when ``enabled``, else returns :data:`OFF`.

    Args:
        enabled (bool): whether ranges are emitted.
    """

    __slots__ = ("enabled",)

    def __init__(self, enabled: bool = False) -> None:
        self.enabled = bool(enabled)

    def __call__(self, name: str, detail: object = None):
        """A context manager: the range ``name`` (``"name detail"`` when ``detail`` is given)."""
        if not self.enabled:
            return OFF
        return _Range(name if detail is None else f"{name} {detail}")

    def wrap(self, name: str, fn: Callable) -> Callable:
        """``fn`` inside the range ``name`` at each call; ``fn`` itself when off (a hot
        per-frame callback then costs nothing extra)."""
        if not self.enabled:
            return fn

        @functools.wraps(fn)
        def ranged(*args, **kwargs):
            with _Range(name):
                return fn(*args, **kwargs)

        return ranged

    def __repr__(self) -> str:
        return f"Ranges(enabled={self.enabled})"


#: Ranges that are off: the default of every component that takes a :class:`Ranges`.
NO_RANGES = Ranges(False)


def nvtx_available() -> bool:
    """Whether this torch has NVTX bindings (CUDA builds; the CPU build has a stub that raises)."""
    return hasattr(_torch()._C, "_nvtx")


def nvtx_requested(flag: bool | None) -> bool:
    """The loader's ``nvtx`` argument, or :data:`NVTX_ENV` when it is ``None``.

    Raises:
        ConfigError: the variable is set to something that is not a yes or a no.
    """
    if flag is not None:
        return bool(flag)
    text = os.environ.get(NVTX_ENV, "").strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ConfigError(f"environment variable {NVTX_ENV}={text!r} is not a yes or a no; "
                      f"set it to 1 (NVTX ranges on) or 0 (off)")


def resolve_ranges(flag: bool | None) -> Ranges:
    """The :class:`Ranges` of a loader: on when requested (``flag``, else :data:`NVTX_ENV`) and
    this torch can emit NVTX; off, silently, on a CPU build of torch (nothing to profile)."""
    return Ranges(nvtx_requested(flag) and nvtx_available())
