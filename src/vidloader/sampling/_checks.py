"""Argument checks shared by the samplers: each failure is a ConfigError naming value and fix."""

from __future__ import annotations

import numpy as np

from ..errors import ConfigError


def check_int(name: str, value: object, *, minimum: int | None = None, fix: str = "") -> int:
    """``value`` as an ``int``; :class:`ConfigError` if it is not an integer or below ``minimum``.

    ``bool`` is refused although it subclasses ``int``: ``batch_size=True`` is a mistake.
    """
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ConfigError(f"{name} must be an int, got {value!r} ({type(value).__name__})")
    if minimum is not None and value < minimum:
        hint = f"; {fix}" if fix else ""
        raise ConfigError(f"{name} must be >= {minimum}, got {value}{hint}")
    return int(value)


def check_optional_int(name: str, value: object, *, minimum: int) -> int | None:
    """Like :func:`check_int`, with ``None`` passed through (meaning "the default")."""
    return None if value is None else check_int(name, value, minimum=minimum)


def check_bool(name: str, value: object) -> bool:
    """``value`` if it is a ``bool``; :class:`ConfigError` otherwise (``"false"`` is truthy)."""
    if not isinstance(value, (bool, np.bool_)):
        raise ConfigError(f"{name} must be True or False, got {value!r} ({type(value).__name__})")
    return bool(value)


def check_plan_args(
    epoch: int, batch_size: int, rank: int, world_size: int, drop_last: bool
) -> tuple[int, int, int, int, bool]:
    """Validate the arguments every ``plan_epoch`` takes; ConfigError naming the bad one."""
    epoch = check_int("epoch", epoch, minimum=0)
    batch_size = check_int("batch_size", batch_size, minimum=1)
    world_size = check_int("world_size", world_size, minimum=1)
    rank = check_int("rank", rank, minimum=0)
    if rank >= world_size:
        raise ConfigError(f"rank={rank} is not below world_size={world_size}")
    return epoch, batch_size, rank, world_size, check_bool("drop_last", drop_last)
