"""Build a :class:`VideoIndex` over files and directories, probing in worker processes."""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import FIRST_COMPLETED, Executor, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool

from .._utils._procs import worker_context
from ..constants import VIDEO_EXTENSIONS
from ..errors import ConfigError, MediaError
from ._probe import probe_video
from ._record import RejectedVideo, VideoIndex, VideoRecord
from ._streams import StreamChoice, check_stream_choice

logger = logging.getLogger(__name__)

#: Below this many files, ``num_workers=None`` probes in-process: starting the workers costs
#: more than probing a few files.
_IN_PROCESS_BELOW = 16

#: Most files one worker task probes; small enough for a smooth progress bar.
_MAX_CHUNK = 64

Probe = Callable[[str], VideoRecord]
Result = VideoRecord | RejectedVideo
PathArg = str | os.PathLike


def build_index(
    paths_or_dirs: PathArg | Iterable[PathArg],
    *,
    num_workers: int | None = None,
    extensions: Sequence[str] = VIDEO_EXTENSIONS,
    progress: bool = True,
    recursive: bool = True,
    stream: StreamChoice = "best",
    executor: Executor | None = None,
    shard_dir: str | os.PathLike | None = None,
    chunk_files: int = 256,
) -> VideoIndex:
    """Probe every video under the given paths and return the index.

    Directories are expanded to the files whose extension is in ``extensions``
    (case-insensitive); explicitly listed files are probed whatever their extension. Records
    are in sorted order of absolute paths, whatever the order of the inputs.

    Files that cannot be indexed (missing, empty, corrupt, no video stream, an MP4 stating
    more frames than it holds …) are never dropped silently: they are listed in
    ``index.rejected`` with the reason, and one warning is logged with their count. Files
    indexed although their frames disagree with the container's stated duration or count
    keep the reason in ``record.warning`` (listed by ``index.flagged``, logged once).

    Args:
        paths_or_dirs: a file, a directory, or an iterable of them.
        num_workers: probing processes (forks of vidloader's fork server, which never re-run
            your script); ``0`` probes in this process; ``None`` uses one per CPU, or probes
            in-process for fewer than 16 files.
        extensions: file extensions collected from directories.
        progress: show a tqdm progress bar (only on a terminal).
        recursive: also search the sub-directories of directories.
        stream: which video stream of each file: ``"best"`` (the ``ffmpeg`` command line's
            choice: the largest, a *default* one preferred, never cover art), ``"first"``, or
            a stream index (a file without that video stream is rejected). Each record's
            :attr:`~VideoRecord.stream_index` says which one was indexed.
        executor: probe on this ``concurrent.futures.Executor`` instead (a Dask
            ``Client.get_executor()``, Ray's ``RayExecutor``, a process pool), in tasks of
            ``chunk_files`` files; ``num_workers`` is then unused.
        shard_dir: with ``executor``, write each chunk's results there as an index shard
            (the workers must be able to write it) and reuse finished shards, so rerunning
            a killed build continues where it stopped. The merged index is returned.
        chunk_files: files per executor task and shard.

    Returns:
        The :class:`VideoIndex`.

    Raises:
        ConfigError: ``num_workers`` is negative, or ``stream`` is not a stream choice.
    """
    probe = functools.partial(probe_video, stream=check_stream_choice(stream))
    files, missing = _expand(paths_or_dirs, extensions, recursive)
    if executor is not None:  # a cluster engine's executor: chunks, shards, resume
        results = _probe_on(executor, files, progress, shard_dir, chunk_files, probe)
    else:
        results = _probe_all(files, _resolve_workers(num_workers, len(files)), progress, probe)
    records = [r for r in results if isinstance(r, VideoRecord)]
    rejected = sorted(
        missing + [r for r in results if isinstance(r, RejectedVideo)], key=lambda r: r.path
    )
    if rejected:
        logger.warning(
            "build_index: %d of %d files rejected (see index.rejected for the reasons)",
            len(rejected), len(files) + len(missing),
        )
    flagged = [r for r in records if r.warning]
    if flagged:
        logger.warning(
            "build_index: %d files indexed with a warning (see index.flagged), e.g. %s: %s",
            len(flagged), flagged[0].path, flagged[0].warning,
        )
    return VideoIndex(records, rejected)


def _probe_on(executor: Executor, files: list[str], progress: bool,
              shard_dir: str | os.PathLike | None, chunk_files: int, probe: Probe) -> list[Result]:
    from ._distributed_build import probe_with_executor

    with _progress_bar(len(files), progress) as bar:
        return probe_with_executor(files, executor, chunk_files=chunk_files, on_done=bar.update, probe=probe,
                                   shard_dir=os.fspath(shard_dir) if shard_dir else None)


def _as_list(paths_or_dirs: PathArg | Iterable[PathArg]) -> list[str]:
    if isinstance(paths_or_dirs, (str, os.PathLike)):
        return [os.fspath(paths_or_dirs)]
    return [os.fspath(p) for p in paths_or_dirs]


def _expand(
    paths_or_dirs: PathArg | Iterable[PathArg], extensions: Sequence[str], recursive: bool
) -> tuple[list[str], list[RejectedVideo]]:
    """Sorted, de-duplicated absolute file paths, and the inputs that do not exist."""
    exts = tuple(e.lower() for e in extensions)
    files: set[str] = set()
    missing: list[RejectedVideo] = []
    for item in _as_list(paths_or_dirs):
        path = os.path.abspath(item)
        if os.path.isdir(path):
            files.update(_walk(path, exts, recursive))
        elif os.path.exists(path):
            files.add(path)
        else:
            missing.append(RejectedVideo(path, "no such file or directory"))
    return sorted(files), missing


def _walk(directory: str, exts: tuple[str, ...], recursive: bool) -> Iterable[str]:
    for root, dirs, names in os.walk(directory):
        for name in names:
            if name.lower().endswith(exts):
                yield os.path.join(root, name)
        if not recursive:
            dirs.clear()


def _resolve_workers(num_workers: int | None, num_files: int) -> int:
    if num_workers is None:
        if num_files < _IN_PROCESS_BELOW:
            return 0
        return max(1, min(os.cpu_count() or 1, num_files))
    if num_workers < 0:
        raise ConfigError(f"num_workers must be >= 0 (0 probes in-process), not {num_workers}")
    return min(num_workers, num_files)


def _probe_one(path: str, probe: Probe = probe_video) -> Result:
    """Probe ``path``; any failure becomes a :class:`RejectedVideo` carrying the reason."""
    try:
        return probe(path)
    except MediaError as exc:
        return RejectedVideo(path, str(exc).removeprefix(f"{path}: "))
    except Exception as exc:  # noqa: BLE001 - one odd file must not stop the whole index
        return RejectedVideo(path, f"unexpected {type(exc).__name__} while probing: {exc}")


def _probe_chunk(paths: list[str], probe: Probe = probe_video) -> list[Result]:
    return [_probe_one(p, probe) for p in paths]


def _progress_bar(total: int, progress: bool):
    from tqdm.auto import tqdm

    # disable=None lets tqdm hide the bar when stderr is not a terminal (CI logs, pipes).
    return tqdm(total=total, desc="indexing videos", unit="video",
                disable=None if progress else True)


def _probe_all(
    files: list[str], workers: int, progress: bool, probe: Probe = probe_video
) -> list[Result]:
    """Results in the order of ``files``."""
    with _progress_bar(len(files), progress) as bar:
        if workers == 0:
            results = []
            for path in files:
                results.append(_probe_one(path, probe))
                bar.update()
            return results
        done = _probe_in_workers(files, workers, bar, probe)
    return [done[p] for p in files]


def _probe_in_workers(files: list[str], workers: int, bar, probe: Probe) -> dict[str, Result]:
    """Probe in worker processes; survive a worker that crashes (e.g. an FFmpeg segfault).

    A crash breaks the whole pool and leaves the unfinished files over, in submission order,
    the culprit among the first. So the first leftover is probed in a pool of its own (a crash
    there names the file, which is rejected) and the rest go on in a fresh pool, one file per
    task. Every round finishes at least one file, so this ends.
    """
    chunk = max(1, min(_MAX_CHUNK, len(files) // (workers * 8)))
    done, left = _run_pool(files, workers, chunk, bar, probe)
    if left:
        logger.warning("build_index: a probing process died; retrying %d files", len(left))
    while left:
        first, rest = left[0], left[1:]
        alone, crashed = _run_pool([first], 1, 1, bar, probe)
        done.update(alone)
        if crashed:
            reason = "the probing process crashed on this file (an FFmpeg fault?)"
            done[first] = RejectedVideo(first, reason)
            bar.update()
        more, left = _run_pool(rest, workers, 1, bar, probe) if rest else ({}, [])
        done.update(more)
    return done


def _run_pool(
    files: list[str], workers: int, chunk: int, bar, probe: Probe
) -> tuple[dict[str, Result], list[str]]:
    """Probe ``files`` in one process pool; return the results and the files a crash left over."""
    chunks = [files[i : i + chunk] for i in range(0, len(files), chunk)]
    done: dict[str, Result] = {}
    # Never a fork of this process (it may hold CUDA or threads): forks of the fork server.
    with ProcessPoolExecutor(max_workers=min(workers, len(chunks)), mp_context=worker_context()) as pool:
        pending = {pool.submit(_probe_chunk, c, probe): c for c in chunks}
        while pending:
            finished, _ = wait(pending, return_when=FIRST_COMPLETED)
            for fut in finished:
                paths = pending.pop(fut)
                try:
                    results = fut.result()
                except BrokenProcessPool:
                    return done, [p for c in [paths, *pending.values()] for p in c]
                done.update(zip(paths, results))
                bar.update(len(paths))
    return done, []
