"""Lazy re-exports (PEP 562): a package's public names, each imported on first use.

A package ``__init__`` that imports every layer makes ``import vidloader.index`` (which runs
``vidloader/__init__.py`` first) import torch too; with lazy re-exports a command that needs
only the index starts in a fraction of a second.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping


def lazy_exports(package: str, homes: Mapping[str, str]) -> tuple[Callable, Callable]:
    """``(__getattr__, __dir__)`` for the module ``package``.

    Args:
        package (str): the package's ``__name__``.
        homes (Mapping[str, str]): each public name -> the module defining it, relative to
            ``package`` (``".pipeline"``, ``"._cli"``).

    Returns:
        The two module-level functions to assign in the package: ``__getattr__`` imports a
        name's home on first use and caches the name on the package (later look-ups do not
        come back); ``__dir__`` lists the public names beside what is already loaded.
    """
    def __getattr__(name: str):
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(home, package), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *homes})

    return __getattr__, __dir__
