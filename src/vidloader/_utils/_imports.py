"""Optional-dependency probes: one place that knows which extra provides what."""

from __future__ import annotations

import importlib
from types import ModuleType

from ..errors import BackendUnavailableError

_EXTRA_OF = {
    "av": "vidloader (PyAV is a core dependency: pip install av)",
    "PyNvVideoCodec": "vidloader[nvdec]",
    "matplotlib": "vidloader[bench]",
    "psutil": "vidloader[bench]",
    "decord": "decord",
    "PIL.Image": "vidloader[images]",
    "nvidia.nvimgcodec": "vidloader[images-gpu]",
}


def require(module: str, *, purpose: str) -> ModuleType:
    """Import ``module`` or raise :class:`BackendUnavailableError` naming the extra to install."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        extra = _EXTRA_OF.get(module, module)
        raise BackendUnavailableError(
            f"{purpose} needs the Python package {module!r}, which could not be imported "
            f"({exc}). Install it with: pip install '{extra}'"
        ) from exc


def available(module: str) -> bool:
    """Whether ``module`` can be imported (without raising)."""
    try:
        importlib.import_module(module)
    except Exception:
        return False
    return True
