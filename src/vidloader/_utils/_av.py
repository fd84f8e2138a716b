"""Opening media files with PyAV the same way in every layer."""

from __future__ import annotations

from typing import Any


def open_input(path: str, **kwargs: Any) -> Any:
    """``av.open(path, "r", **kwargs)``, tolerant of undecodable metadata.

    Odd bytes in a metadata tag (a damaged or foreign-encoded title) must not make a playable
    video unreadable: PyAV < 19 raises ``UnicodeDecodeError`` unless given
    ``metadata_errors="replace"``; PyAV 19 removed the argument (it decodes tags leniently
    by itself), hence the ``TypeError`` retry.
    """
    import av

    try:
        return av.open(path, "r", metadata_errors="replace", **kwargs)
    except TypeError:
        return av.open(path, "r", **kwargs)
