"""Probing on any ``concurrent.futures.Executor`` (a Dask or Ray cluster, a process pool), in
chunks written as index shards and merged, so a killed build continues where it stopped.

Nothing here starts processes: the caller's executor runs :func:`probe_shard` wherever it runs
tasks. Shards go to ``shard_dir``, which the executor's workers must be able to write (shared
storage on a cluster). A shard is named by its chunk number and a hash of its file list, so a
changed file list never reuses a stale shard.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from concurrent.futures import Executor, Future, as_completed

from ..constants import INDEX_FORMAT_VERSION
from ..errors import ConfigError, IndexFormatError, WorkerError
from ._probe import probe_video
from ._record import RejectedVideo, VideoIndex, VideoRecord

Result = VideoRecord | RejectedVideo

#: Files per task (and per shard) by default: large enough that scheduling costs little
#: against probing (~ms per file), small enough that a killed build loses little.
DEFAULT_CHUNK_FILES = 256


def shard_name(number: int, paths: list[str], options: str = "") -> str:
    """The shard of chunk ``number``: named by a hash of its files and of the probe's options
    (``stream=``, the index format), so a rerun with other options never reuses it."""
    digest = hashlib.sha1("\n".join([options, *paths]).encode()).hexdigest()[:12]
    return f"shard-{number:06d}-{digest}.vlindex.npz"


def _probe_options(probe: Callable) -> str:
    keywords = sorted(getattr(probe, "keywords", {}).items())
    return f"index v{INDEX_FORMAT_VERSION} {keywords!r}"


def _unchanged(results: list[Result]) -> bool:
    """Whether every indexed file still has the size and mtime its shard recorded (a file
    replaced since would otherwise come back from the shard and fail every decode as stale)."""
    for r in results:
        if isinstance(r, VideoRecord):
            try:
                st = os.stat(r.path)
            except OSError:
                return False
            if st.st_size != r.size_bytes or (r.mtime_ns and st.st_mtime_ns != r.mtime_ns):
                return False
    return True


def probe_shard(paths: list[str], shard_path: str | None, probe: Callable = probe_video) -> list[Result]:
    """Probe ``paths`` (a task on the executor); write the shard atomically when asked."""
    from ._build import _probe_one  # the same per-file rule (failures become rejections)

    results = [_probe_one(p, probe) for p in paths]
    if shard_path is not None:
        partial = f"{shard_path}.{os.getpid()}.partial.npz"
        _as_index(results).save(partial)
        os.replace(partial, shard_path)  # a shard exists only once complete
    return results


def _as_index(results: list[Result]) -> VideoIndex:
    return VideoIndex([r for r in results if isinstance(r, VideoRecord)],
                      [r for r in results if isinstance(r, RejectedVideo)])


def _read_shard(path: str, paths: list[str]) -> list[Result] | None:
    """The shard's results in the order of ``paths``, or None if it is unreadable."""
    try:
        # A shard lives in shard_dir, usually outside the videos' folder: its paths are
        # admitted only if they are exactly this chunk's files (checked below).
        shard = VideoIndex.load(path, allow_outside_root=True)
    except (IndexFormatError, OSError, ValueError):
        return None
    by_path: dict[str, Result] = {r.path: r for r in [*shard, *shard.rejected]}
    if set(by_path) != set(paths):
        return None
    return [by_path[p] for p in paths]


def probe_with_executor(
    files: list[str], executor: Executor, *, chunk_files: int, shard_dir: str | None,
    on_done: Callable[[int], None], probe: Callable = probe_video,
) -> list[Result]:
    """Results in the order of ``files``; chunks with a finished shard are not probed again."""
    if chunk_files < 1:
        raise ConfigError(f"chunk_files={chunk_files}: a chunk needs at least 1 file")
    if shard_dir is not None:
        os.makedirs(shard_dir, exist_ok=True)
    chunks = [files[i : i + chunk_files] for i in range(0, len(files), chunk_files)]
    results: list[list[Result] | None] = [None] * len(chunks)
    pending: dict[Future, int] = {}
    for k, chunk in enumerate(chunks):
        shard = os.path.join(shard_dir, shard_name(k, chunk, _probe_options(probe))) if shard_dir else None
        if (shard and os.path.exists(shard) and (done := _read_shard(shard, chunk)) is not None
                and _unchanged(done)):
            results[k] = done
            on_done(len(chunk))
            continue
        pending[executor.submit(probe_shard, chunk, shard, probe)] = k
    for future in as_completed(pending):
        k = pending[future]
        try:
            results[k] = future.result()
        except Exception as exc:
            resume = (" Finished chunks are kept in shard_dir: rerun to continue." if shard_dir
                      else " Pass shard_dir= to keep finished chunks for a rerun.")
            raise WorkerError(f"build_index: the executor failed on chunk {k} of "
                              f"{len(chunks)}: {exc}.{resume}", path=chunks[k][0]) from exc
        on_done(len(chunks[k]))
    return [r for chunk in results for r in chunk]
