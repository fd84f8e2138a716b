"""Executor registry: backend name → executor class, imported only when asked for.

``import vidloader`` must work without PyNvVideoCodec or a GPU, so the NVDEC executor is
imported inside its factory, on first use.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import ConfigError
from ._base import Executor


def _cpu() -> type[Executor]:
    from .cpu import CpuExecutor

    return CpuExecutor


def _nvdec() -> type[Executor]:
    from .nvdec import NvdecExecutor  # lazy: pulls in torch.cuda and PyNvVideoCodec

    return NvdecExecutor


_BACKENDS: dict[str, Callable[[], type[Executor]]] = {"cpu": _cpu, "nvdec": _nvdec}


def available_backends() -> tuple[str, ...]:
    """Names :func:`get_executor` accepts (whether their dependencies are installed or not)."""
    return tuple(_BACKENDS)


def get_executor(backend: str, **options: Any) -> Executor:
    """Create an executor for ``backend``.

    Args:
        backend: ``"cpu"`` (FFmpeg through PyAV) or ``"nvdec"`` (PyNvVideoCodec).
        **options: keyword options of the executor's constructor (e.g. ``thread_count`` for
            ``"cpu"``).

    Returns:
        A new executor; one executor serves one thread.

    Raises:
        ConfigError: unknown backend.
        BackendUnavailableError: the backend's optional dependency is missing.
    """
    factory = _BACKENDS.get(backend)
    if factory is None:
        raise ConfigError(
            f"unknown decoding backend {backend!r}; allowed values: {', '.join(_BACKENDS)}"
        )
    return factory()(**options)
