"""Is a file still the one the index describes? Size and modification time, one ``stat``.

An index's frame table (pts, keyframes) is only true of the bytes that were probed. A file
replaced by another valid video of the same length would otherwise decode without an error,
its frames delivered under the old entry's label. Comparing size and mtime costs one
``stat`` (~2 µs) per file open and per reuse of an open file (a file rewritten in place is
read through an open handle too), and catches every rewrite that changes either; a rewrite that
keeps both (``rsync -t`` of same-sized content, or an in-place edit followed by ``touch -d``)
is not caught.
"""

from __future__ import annotations

import datetime
import os

from ..errors import StaleIndexError, VideoNotFoundError


def _when(mtime_ns: int) -> str:
    stamp = datetime.datetime.fromtimestamp(mtime_ns / 1e9, datetime.timezone.utc)
    return stamp.isoformat(timespec="seconds")


def check_unchanged(record) -> None:
    """Raise :class:`StaleIndexError` if ``record.path`` differs in size or modification time
    from what the index recorded (a zero ``mtime_ns`` or ``size_bytes`` is not compared)."""
    try:
        st = os.stat(record.path)
    except FileNotFoundError as exc:
        raise VideoNotFoundError(record.path, "no such file; it was deleted or moved after "
                                 "indexing: re-index the dataset") from exc
    changes = []
    if record.size_bytes and st.st_size != record.size_bytes:
        changes.append(f"size {record.size_bytes} -> {st.st_size} bytes")
    if record.mtime_ns and st.st_mtime_ns != record.mtime_ns:
        delta = (st.st_mtime_ns - record.mtime_ns) / 1e9
        changes.append(f"modified {_when(record.mtime_ns)} -> {_when(st.st_mtime_ns)}, "
                       f"{delta:+.3f} s")
    if changes:
        raise StaleIndexError(
            record.path,
            f"the file changed after it was indexed ({', '.join(changes)}); re-index it with "
            "build_index(...) (or restore the indexed file). A copied dataset whose "
            "modification times changed can be loaded with VideoIndex.load(path, "
            "check_mtime=False), which compares sizes only",
        )
