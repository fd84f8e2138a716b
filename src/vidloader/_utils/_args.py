"""Argument checks every layer shares: each failure is a :class:`ConfigError` that names the
argument, the value (and its type) and what to pass instead."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..errors import ConfigError


def _hint(fix: str) -> str:
    return f"; {fix}" if fix else ""


def check_int(name: str, value: object, *, minimum: int | None = None, fix: str = "") -> int:
    """``value`` as an ``int``; :class:`ConfigError` if it is not an integer or below ``minimum``.

    ``bool`` is refused although it subclasses ``int``: ``batch_size=True`` is a mistake.
    """
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        bound = f" >= {minimum}" if minimum is not None else ""
        raise ConfigError(f"{name} must be an int{bound}, got {value!r} "
                          f"({type(value).__name__}){_hint(fix)}")
    if minimum is not None and value < minimum:
        raise ConfigError(f"{name} must be >= {minimum}, got {value}{_hint(fix)}")
    return int(value)


def check_optional_int(name: str, value: object, *, minimum: int, fix: str = "") -> int | None:
    """Like :func:`check_int`, with ``None`` passed through (meaning "the default")."""
    return None if value is None else check_int(name, value, minimum=minimum, fix=fix)


def check_bool(name: str, value: object) -> bool:
    """``value`` if it is a ``bool``; :class:`ConfigError` otherwise (``"false"`` is truthy)."""
    if not isinstance(value, (bool, np.bool_)):
        raise ConfigError(f"{name} must be True or False, got {value!r} ({type(value).__name__})")
    return bool(value)


def check_choice(name: str, value: object, choices: Sequence[str], *, fix: str = "") -> str:
    """``value`` if it is one of ``choices`` (strings)."""
    if not isinstance(value, str) or value not in choices:
        listed = ", ".join(repr(c) for c in choices)
        raise ConfigError(f"{name} must be one of {listed}, got {value!r}{_hint(fix)}")
    return value


def check_positive_number(name: str, value: object, *, fix: str = "") -> float:
    """``value`` as a ``float`` > 0 (ints accepted, bools refused)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) \
            or not value > 0:
        raise ConfigError(f"{name} must be a number > 0, got {value!r} "
                          f"({type(value).__name__}){_hint(fix)}")
    return float(value)
