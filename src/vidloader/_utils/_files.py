"""Small file-system helpers shared across layers."""

from __future__ import annotations

import os
import shutil


def read_file(path: str) -> bytes | None:
    """The file's bytes, or ``None`` if it cannot be read (the decoder then reports it)."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


def link_or_copy(source: str | os.PathLike, target: str | os.PathLike) -> None:
    """``target`` as a hard link of ``source`` (a copy keeping its times where the file system
    refuses links: an index's records check a file's size and modification time); nothing
    if ``target`` exists. Its folder is made if missing."""
    if os.path.exists(target):
        return
    os.makedirs(os.path.dirname(os.path.abspath(target)), exist_ok=True)
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)
