"""``prepare_dataset``: re-encode every video under a folder, in parallel, resumably."""

from __future__ import annotations

import dataclasses
import json
import logging
import multiprocessing
import os
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

from ..constants import VIDEO_EXTENSIONS
from ..errors import ConfigError, MediaError
from ._transcode import Codec, FileChange, PrepareOptions, transcode

log = logging.getLogger(__name__)


@dataclasses.dataclass
class PrepareReport:
    """What :func:`prepare_dataset` did, file by file."""

    source: str
    destination: str
    options: PrepareOptions
    files: list[FileChange]

    def count(self, status: str) -> int:
        return sum(f.status == status for f in self.files)

    def summary(self) -> str:
        """A few lines: files done / skipped / failed, bytes before and after, GOPs."""
        done = [f for f in self.files if f.status == "done"]
        before = sum(f.bytes_before for f in done)
        after = sum(f.bytes_after for f in done)
        lines = [f"{self.count('done')} re-encoded, {self.count('skipped')} already done "
                 f"(skipped), {self.count('failed')} failed → {self.destination}"]
        if done:
            gop_b = sum(f.gop_before for f in done) / len(done)
            gop_a = sum(f.gop_after for f in done) / len(done)
            resized = sum(f.size_before != f.size_after for f in done)
            dropped = sum(f.streams_dropped for f in done)
            lines.append(f"size {before / 1e6:.2f} MB → {after / 1e6:.2f} MB "
                         f"(×{after / max(1, before):.2f}); mean GOP {gop_b:.1f} → {gop_a:.1f} "
                         f"frames; {resized} resized; {dropped} non-video streams dropped")
        lines += [f"  failed: {f.source}: {f.reason}" for f in self.files if f.status == "failed"]
        return "\n".join(lines)

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=1)


#: The report's name in the destination folder.
REPORT_NAME = "prepare-report.json"


def write_report(report: PrepareReport) -> tuple[Path, dict]:
    """Write ``report`` to ``destination/prepare-report.json``, merged with the report that
    earlier runs left there (:func:`merge_reports`), so a rerun that skips finished files
    keeps what was measured when they were encoded. Written whole under a temporary name,
    then renamed. Returns the path and the merged report."""
    path = Path(report.destination) / REPORT_NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    previous = None
    if path.exists():
        try:
            previous = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            kept = path.with_name(REPORT_NAME + ".unreadable")
            log.warning("%s is unreadable (%s): kept as %s, starting a new report", path, exc, kept)
            os.replace(path, kept)
    merged = merge_reports(previous, report)
    tmp = path.with_name(REPORT_NAME + ".partial")
    tmp.write_text(json.dumps(merged, indent=1))
    os.replace(tmp, path)
    return path, merged


def merge_reports(previous: dict | None, report: PrepareReport) -> dict:
    """The report of every run so far: ``runs`` (each run's options and counts, oldest
    first) and one entry per file, its latest real outcome with ``run`` (the run it comes
    from). A file a rerun skipped keeps its earlier entry, its ``skipped_in`` listing those
    reruns; a file a rerun encoded again (or failed again) gets the new entry, the earlier
    ones under ``earlier``. Files of earlier runs that this run did not see are kept.

    ``previous``: an earlier :func:`merge_reports` result, or a single run's
    :meth:`PrepareReport.to_json` (from before reports were merged), or ``None``.
    """
    current = dataclasses.asdict(report)
    counts = {status: report.count(status) for status in ("done", "skipped", "failed")}
    runs = [] if previous is None else list(previous.get("runs") or [_run_of(previous)])
    k = len(runs)
    runs.append({"options": current["options"], **counts})
    files = {} if previous is None else {f["source"]: f for f in previous["files"]}
    for change in current["files"]:
        old = files.get(change["source"])
        if old is None:
            files[change["source"]] = {**change, "run": k}
        elif change["status"] == "skipped":
            files[change["source"]] = {**old, "skipped_in": [*old.get("skipped_in", []), k]}
        else:
            earlier = [*old.pop("earlier", []), {**old, "run": old.get("run", 0)}]
            files[change["source"]] = {**change, "run": k, "earlier": earlier}
    return {"source": current["source"], "destination": current["destination"],
            "options": current["options"], "runs": runs,
            "files": [files[s] for s in sorted(files)]}


def _run_of(single: dict) -> dict:
    """A run's summary from a single-run report."""
    statuses = [f["status"] for f in single["files"]]
    return {"options": single["options"],
            **{s: statuses.count(s) for s in ("done", "skipped", "failed")}}


def prepare_dataset(
    source: str | os.PathLike,
    destination: str | os.PathLike,
    *,
    gop: int = 30,
    bframes: bool = False,
    max_size: int | None = None,
    codec: Codec = "h264",
    crf: int = 20,
    preset: str = "veryfast",
    num_workers: int | None = None,
    progress: bool = True,
    extensions: Sequence[str] = VIDEO_EXTENSIONS,
) -> PrepareReport:
    """Re-encode every video under ``source`` into ``destination`` for fast random access.

    Each output (same relative path, ``.mp4``) has a keyframe every ``gop`` frames, closed
    GOPs, yuv420p, the video stream only (audio and subtitles are left out), and no B-frames
    unless ``bframes``. Random access to a frame decodes on average about ``gop / 2`` frames,
    so a smaller ``gop`` buys speed with disk space (``vidloader bench gop-cost`` measures both).

    Resumable: an output that already exists is skipped, and an output is written under a
    temporary name and renamed only when complete, so a killed run is continued by running
    the same command again. A file that cannot be re-encoded is reported, not fatal.

    Args:
        source: folder of videos (searched recursively) or one file.
        destination: output folder (created); must not be inside ``source``.
        gop (int): keyframe interval in frames.
        bframes (bool): allow B-frames (smaller files, more decoding per random frame).
        max_size (int | None): scale down so the longer side is at most this (kept even).
        codec ("h264" | "hevc"): output codec (libx264 or libx265).
        crf (int), preset (str): encoder quality and speed.
        num_workers (int | None): encoding processes (``spawn``); default one per core,
            ``0`` encodes in this process.
        progress (bool): show a tqdm progress bar.
        extensions: file extensions collected from ``source``.

    Returns:
        PrepareReport: per file, ``done`` / ``skipped`` / ``failed`` and what changed.

    Raises:
        ConfigError: ``gop`` < 1, ``source`` missing, or ``destination`` inside ``source``.
    """
    src, dst = Path(source).resolve(), Path(destination).resolve()
    _check(src, dst, gop, max_size)
    opts = PrepareOptions(gop=gop, bframes=bframes, max_size=max_size, codec=codec, crf=crf,
                          preset=preset)
    jobs = _jobs(src, dst, tuple(e.lower() for e in extensions))
    files = _run(jobs, opts, num_workers, progress)
    return PrepareReport(str(src), str(dst), opts, sorted(files, key=lambda f: f.source))


def _check(src: Path, dst: Path, gop: int, max_size: int | None) -> None:
    if gop < 1:
        raise ConfigError(f"gop={gop}: the keyframe interval must be at least 1 frame")
    if max_size is not None and max_size < 2:
        raise ConfigError(f"max_size={max_size}: must be at least 2 pixels, or None")
    if not src.exists():
        raise ConfigError(f"{src}: no such file or folder to prepare")
    if dst == src or (src.is_dir() and src in dst.parents):
        raise ConfigError(f"destination {dst} is inside the source {src}: choose a folder "
                          "outside it (a rerun would re-encode its own outputs)")


def _jobs(src: Path, dst: Path, exts: tuple[str, ...]) -> list[tuple[str, str]]:
    """``(source file, output file)`` pairs, sorted, mirroring the source tree."""
    if src.is_file():
        return [(str(src), str(dst / (src.stem + ".mp4")))]
    found = sorted(p for p in src.rglob("*") if p.is_file() and p.suffix.lower() in exts)
    return [(str(p), str((dst / p.relative_to(src)).with_suffix(".mp4"))) for p in found]


def _one(job: tuple[str, str], opts: PrepareOptions) -> FileChange:
    source, output = job
    if os.path.exists(output):  # finished by an earlier run (outputs appear only when complete)
        return FileChange(source, output, "skipped", reason="output exists")
    try:
        return transcode(source, output, opts)
    except MediaError as exc:
        return FileChange(source, output, "failed", reason=str(exc).removeprefix(f"{source}: "))


def _run(jobs, opts: PrepareOptions, num_workers: int | None, progress: bool) -> list[FileChange]:
    from tqdm.auto import tqdm

    workers = (os.cpu_count() or 1) if num_workers is None else num_workers
    if workers < 0:
        raise ConfigError(f"num_workers={workers}: use 0 (this process) or more")
    bar = tqdm(total=len(jobs), desc="preparing videos", unit="video",
               disable=None if progress else True)
    with bar:
        if workers == 0 or len(jobs) <= 1:
            return [_tick(bar, _one(job, opts)) for job in jobs]
        ctx = multiprocessing.get_context("spawn")  # the caller may hold threads or CUDA
        with ProcessPoolExecutor(min(workers, len(jobs)), mp_context=ctx) as pool:
            futures = [pool.submit(_one, job, opts) for job in jobs]
            return [_tick(bar, f.result()) for f in as_completed(futures)]


def _tick(bar, change: FileChange) -> FileChange:
    bar.update()
    return change
