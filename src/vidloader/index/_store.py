"""Save and load a :class:`VideoIndex` as one versioned, columnar, pickle-free ``.npz`` file.

Layout (every member a plain numpy array; ``allow_pickle=False`` on load):

- ``header``: JSON text ``{"format": "vidloader-index", "version": N, "created": ISO time, …}``
- ``pts`` / ``pts_offsets``: all pts concatenated (int64), video ``k`` owns
  ``pts[pts_offsets[k]:pts_offsets[k + 1]]``; likewise ``keyframes`` / ``keyframe_offsets``.
- one array per scalar field (int64, float64 or unicode), time base as ``time_base_num/den``.
- ``rejected_path`` / ``rejected_reason``: unicode arrays.

Loading builds records whose ``pts``/``keyframes`` are views of the flat arrays (no copies).

Paths of videos inside the index file's folder (at any depth) are stored relative to that
folder, and resolved against the folder the file is loaded from: a dataset folder that holds
its index can be moved or mounted elsewhere. Other paths stay absolute. Version 1 files (all
paths absolute) are still read.

Loading confines paths to the index file's folder: an index from someone else must not make
this process read ``../../etc/passwd``. A path that leaves the folder (``..`` or absolute) is
refused with :class:`PathOutsideRootError` unless ``allow_outside_root`` allows it. The
check is lexical (``os.path.normpath``): a symlink inside the folder is the folder owner's
choice and is followed.

Version 4 adds ``mtime_ns`` (stale files are detected by size and modification time, see
:mod:`._stale`); older files load with ``mtime_ns = 0`` (size compared only). The
``warning`` column (the probe's doubts, :mod:`._crosscheck`) is optional in every version.
"""

from __future__ import annotations

import datetime
import errno
import json
import os
import secrets
import zipfile
from collections.abc import Sequence
from fractions import Fraction

import numpy as np

from ..constants import INDEX_FORMAT_VERSION
from ..errors import IndexFormatError, PathOutsideRootError
from . import _codecs
from ._record import RejectedVideo, VideoIndex, VideoRecord

FORMAT_NAME = "vidloader-index"
#: Versions this vidloader reads: version 1 stored every path absolute; versions 1 and 2 lack
#: the decodability columns (:data:`_V3_COLUMNS`); versions 1 to 3 lack ``mtime_ns``.
_READABLE_VERSIONS = (1, 2, 3, INDEX_FORMAT_VERSION)
_INT_FIELDS = (
    "width", "height", "bit_depth", "rotation", "num_frames", "stream_index", "size_bytes",
    "coded_width", "coded_height", "mtime_ns",
)
_STR_FIELDS = (
    "path", "codec", "pix_fmt", "color_space", "color_range", "profile", "chroma_format", "warning",
)
#: Columns added by version 3 (derived when an older file lacks them).
_V3_COLUMNS = ("coded_width", "coded_height", "profile", "chroma_format")
#: Columns added by version 4 (zero when an older file lacks them: not compared).
_V4_COLUMNS = ("mtime_ns",)
#: Columns a file of any version may lack (empty when absent). Older vidloaders ignore them,
#: so adding one needs no new version.
_OPTIONAL_COLUMNS = ("warning",)
#: ``allow_outside_root``: False (only the index's folder), True (anywhere), or more roots.
AllowedRoots = bool | Sequence[str | os.PathLike]
_REQUIRED = (
    "header", "pts", "pts_offsets", "keyframes", "keyframe_offsets", "fps", "time_base_num",
    "time_base_den", "rejected_path", "rejected_reason", *_INT_FIELDS, *_STR_FIELDS,
)


def save_index(index: VideoIndex, path: str | os.PathLike) -> None:
    """Write ``index`` to ``path`` atomically (a temporary file, then a rename).

    The file is written exactly at ``path``: no ``.npz`` suffix is added.

    Args:
        index: the index to store.
        path: destination file; its directory must exist.
    """
    path = os.fspath(path)
    directory, name = os.path.split(os.path.abspath(path))
    arrays = _columns(list(index), index.rejected, relative_to=directory)
    tmp = os.path.join(directory, f".{name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    # os.open with 0o666 lets the umask decide the mode, as for any file the user writes.
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **arrays)  # a file object: numpy appends no suffix
            f.flush()
            os.fsync(f.fileno())  # the rename must not expose a file whose data isn't on disk
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def _offsets(arrays: list[np.ndarray]) -> np.ndarray:
    out = np.zeros(len(arrays) + 1, np.int64)
    np.cumsum([len(a) for a in arrays], out=out[1:])
    return out


def _flat(arrays: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(arrays).astype(np.int64, copy=False) if arrays else np.zeros(0, np.int64)


def _relative(path: str, root: str) -> str:
    """``path`` relative to ``root`` when it lies inside it, else unchanged (absolute)."""
    rel = os.path.relpath(path, root)
    return path if rel == os.pardir or rel.startswith(os.pardir + os.sep) else rel


def _columns(records: list[VideoRecord], rejected: list[RejectedVideo], *,
             relative_to: str) -> dict[str, np.ndarray]:
    header = {
        "format": FORMAT_NAME,
        "version": INDEX_FORMAT_VERSION,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "num_videos": len(records),
        "num_rejected": len(rejected),
    }
    cols: dict[str, np.ndarray] = {"header": np.array(json.dumps(header))}
    pts = [r.pts for r in records]
    keyframes = [r.keyframes for r in records]
    cols.update(pts=_flat(pts), pts_offsets=_offsets(pts))
    cols.update(keyframes=_flat(keyframes), keyframe_offsets=_offsets(keyframes))
    for name in _INT_FIELDS:
        cols[name] = np.array([getattr(r, name) for r in records], np.int64)
    for name in _STR_FIELDS:
        cols[name] = _strings([getattr(r, name) for r in records])
    cols["path"] = _strings([_relative(r.path, relative_to) for r in records])
    cols["fps"] = np.array([r.fps for r in records], np.float64)
    cols["time_base_num"] = np.array([r.time_base.numerator for r in records], np.int64)
    cols["time_base_den"] = np.array([r.time_base.denominator for r in records], np.int64)
    cols["rejected_path"] = _strings([_relative(r.path, relative_to) for r in rejected])
    cols["rejected_reason"] = _strings([r.reason for r in rejected])
    return cols


def _strings(values: list[str]) -> np.ndarray:
    return np.array(values, dtype=str) if values else np.zeros(0, "<U1")


def load_index(path: str | os.PathLike, *, allow_outside_root: AllowedRoots = False,
               check_mtime: bool = True) -> VideoIndex:
    """Read an index written by :func:`save_index`.

    Args:
        path: the index file.
        allow_outside_root: which video paths outside the index file's folder are accepted:
            ``False`` (default) none, ``True`` any, or a list of further folders.
        check_mtime: keep the recorded modification times, so decoders refuse a file whose
            mtime changed (:class:`StaleIndexError`). ``False`` compares sizes only (a
            dataset copied without preserving times).

    Returns:
        The :class:`VideoIndex`; record ``pts``/``keyframes`` are views of shared arrays.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        IndexFormatError: the file is not a vidloader index, is damaged, or has another version.
        PathOutsideRootError: a video path leaves the allowed folders.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(
            errno.ENOENT,
            "no vidloader index here; build one with build_index(...).save(path)",
            path,
        )
    try:
        loaded = np.load(path, allow_pickle=False)
        if not isinstance(loaded, np.lib.npyio.NpzFile):  # a bare .npy loads as an array
            raise IndexFormatError(f"{path}: a single .npy array, not a vidloader index (.npz)")
        with loaded as npz:
            raw = npz["header"] if "header" in npz.files else None
            version = _check_header(raw, path).get("version")
            _check_members(npz, path, version)
            cols = {name: npz[name] for name in _REQUIRED if name != "header" and name in npz.files}
    except IndexFormatError:
        raise
    except (ValueError, OSError, EOFError, zipfile.BadZipFile, KeyError) as exc:
        raise IndexFormatError(
            f"{path}: not a readable vidloader index ({type(exc).__name__}: {exc}); "
            "rebuild it with build_index(...).save(path)"
        ) from exc
    _upgrade(cols)
    _check_columns(cols, path)
    if not check_mtime:
        cols["mtime_ns"] = np.zeros_like(cols["mtime_ns"])
    # Relative paths (version 2) are relative to the folder the index file is in now.
    root = os.path.dirname(os.path.abspath(path))
    for name in ("path", "rejected_path"):
        cols[name] = _strings([os.path.normpath(os.path.join(root, p)) for p in cols[name].tolist()])
    confine_paths(cols["path"].tolist(), root, allow_outside_root, source=path)
    return VideoIndex(_records(cols), _rejected(cols))


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(os.path.join(root, ""))


def confine_paths(paths: list[str], root: str, allow: AllowedRoots, *, source: str) -> None:
    """Raise :class:`PathOutsideRootError` for the first of ``paths`` (absolute, normalised)
    outside ``root`` and the extra roots ``allow`` names (``True`` allows everything)."""
    if allow is True:
        return
    extra = [] if allow is False else [os.path.normpath(os.path.abspath(os.fspath(r))) for r in allow]
    roots = [os.path.normpath(root), *extra]
    outside = [p for p in paths if not any(_inside(p, r) for r in roots)]
    if outside:
        raise PathOutsideRootError(
            f"{source}: {len(outside)} video path(s) lie outside {roots[0]!r}"
            f"{' and the allowed roots' if extra else ''}, e.g. {outside[0]!r}. An index may "
            "only name files under its own folder; if you trust it, pass "
            "allow_outside_root=True or a list of the folders it may read"
        )


def _check_members(npz, path: str, version) -> None:
    optional = (*_V3_COLUMNS, *_V4_COLUMNS) if version in (1, 2) else _V4_COLUMNS if version == 3 else ()
    optional = (*optional, *_OPTIONAL_COLUMNS)
    missing = [name for name in _REQUIRED if name not in npz.files and name not in optional]
    if missing:
        raise IndexFormatError(f"{path}: vidloader index lacks the columns {missing}; rebuild it")


def _check_header(raw: np.ndarray, path: str) -> dict:
    if raw is None:
        raise IndexFormatError(
            f"{path}: an .npz file without a vidloader header, not a vidloader index; "
            "build one with build_index(...).save(path)"
        )
    try:
        header = json.loads(str(raw))
        fmt, version = header.get("format"), header.get("version")
    except (ValueError, AttributeError) as exc:
        raise IndexFormatError(f"{path}: the index header is not valid JSON ({exc})") from exc
    if fmt != FORMAT_NAME:
        raise IndexFormatError(f"{path}: format {fmt!r} found, expected {FORMAT_NAME!r}")
    if version not in _READABLE_VERSIONS:
        newer = isinstance(version, int) and version > INDEX_FORMAT_VERSION
        fix = "upgrade vidloader" if newer else "rebuild the index"
        raise IndexFormatError(
            f"{path}: index format version {version!r} found, this vidloader reads versions "
            f"{', '.join(map(str, _READABLE_VERSIONS))}; {fix}"
        )
    return header


def _upgrade(cols: dict[str, np.ndarray]) -> None:
    """Codec names as codecs (older files stored the decoder's: ``"libdav1d"``), the
    version 3 columns an older file lacks, derived from ``pix_fmt`` and the picture size, and
    version 4's ``mtime_ns`` (zero: unknown)."""
    def per_value(column: np.ndarray, fn, dtype=None) -> np.ndarray:
        values, inverse = np.unique(column, return_inverse=True)  # a handful of distinct values
        mapped = [fn(v) for v in values.tolist()]
        return (np.array(mapped, dtype) if dtype else _strings(mapped))[inverse] if len(values) else column

    cols["codec"] = per_value(cols["codec"], _codecs.codec_name)
    if "mtime_ns" not in cols:
        cols["mtime_ns"] = np.zeros(len(cols["path"]), np.int64)
    for name in ("profile", *_OPTIONAL_COLUMNS):
        if name not in cols:
            cols[name] = np.full(len(cols["path"]), "", "<U1")
    if "chroma_format" not in cols:
        cols["chroma_format"] = per_value(cols["pix_fmt"], _codecs.chroma_format)
    if "coded_width" not in cols or "coded_height" not in cols:
        align = per_value(cols["codec"], lambda c: _codecs.coded_size(c, 1, 1)[0], np.int64).astype(np.int64)
        cols["coded_width"] = -(-cols["width"] // align) * align
        cols["coded_height"] = -(-cols["height"] // align) * align


def _check_offsets(flat: np.ndarray, offsets: np.ndarray, n: int, what: str, path: str) -> None:
    ok = (
        len(offsets) == n + 1 and offsets[0] == 0 and offsets[-1] == len(flat)
        and bool(np.all(np.diff(offsets) >= 0))
    )
    if not ok:
        raise IndexFormatError(f"{path}: damaged index: {what} offsets do not match the data")


def _check_columns(cols: dict[str, np.ndarray], path: str) -> None:
    """Whole-column versions of ``VideoRecord.__post_init__``'s checks (cheap at 100k)."""
    n = len(cols["path"])
    if any(len(cols[name]) != n for name in (*_INT_FIELDS, *_STR_FIELDS, "fps", "time_base_num")):
        raise IndexFormatError(f"{path}: damaged index: columns of different lengths")
    _check_offsets(cols["pts"], cols["pts_offsets"], n, "pts", path)
    _check_offsets(cols["keyframes"], cols["keyframe_offsets"], n, "keyframe", path)
    if not np.array_equal(np.diff(cols["pts_offsets"]), cols["num_frames"]):
        raise IndexFormatError(f"{path}: damaged index: pts counts differ from num_frames")
    if np.any((cols["num_frames"] > 0) & ~_first_keyframe_is_zero(cols)):
        raise IndexFormatError(f"{path}: damaged index: a video's first frame is not a keyframe")
    if np.any(cols["time_base_den"] <= 0):
        raise IndexFormatError(f"{path}: damaged index: a time base has a non-positive denominator")


def _first_keyframe_is_zero(cols: dict[str, np.ndarray]) -> np.ndarray:
    keyframes, offsets = cols["keyframes"], cols["keyframe_offsets"]
    count = np.diff(offsets)
    if len(keyframes) == 0:
        return np.zeros(len(count), bool)
    first = keyframes[np.minimum(offsets[:-1], len(keyframes) - 1)]
    return (count > 0) & (first == 0)


def _records(cols: dict[str, np.ndarray]) -> list[VideoRecord]:
    pts, po = cols["pts"], cols["pts_offsets"].tolist()
    kf, ko = cols["keyframes"], cols["keyframe_offsets"].tolist()
    columns = {name: cols[name].tolist() for name in (*_INT_FIELDS, *_STR_FIELDS, "fps")}
    columns["time_base"] = _time_bases(cols["time_base_num"], cols["time_base_den"])
    columns["pts"] = [pts[a:b] for a, b in zip(po[:-1], po[1:])]  # views, no copies
    columns["keyframes"] = [kf[a:b] for a, b in zip(ko[:-1], ko[1:])]
    names = tuple(columns)
    new = VideoRecord._unchecked
    return [new(dict(zip(names, row))) for row in zip(*columns.values())]


def _time_bases(num: np.ndarray, den: np.ndarray) -> list[Fraction]:
    """One shared Fraction per distinct time base (datasets use a handful)."""
    cache: dict[tuple[int, int], Fraction] = {}
    out = []
    for pair in zip(num.tolist(), den.tolist()):
        tb = cache.get(pair)
        if tb is None:
            tb = cache[pair] = Fraction(*pair)
        out.append(tb)
    return out


def _rejected(cols: dict[str, np.ndarray]) -> list[RejectedVideo]:
    paths, reasons = cols["rejected_path"].tolist(), cols["rejected_reason"].tolist()
    return [RejectedVideo(p, r) for p, r in zip(paths, reasons)]
