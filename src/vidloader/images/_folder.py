"""``ImageFolder``: ``root/<class>/*.jpg`` (ImageNet layout), labels from folder names,
headers probed in parallel with a progress bar, bad files skipped and listed."""

from __future__ import annotations

import logging
import multiprocessing
import operator
import os
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Literal

import numpy as np

from ..errors import ConfigError, MediaError
from ._dataset import ImageDataset
from ._jpeg_ends import file_cut_short
from ._pillow import probe_image_header

log = logging.getLogger(__name__)

DEFAULT_IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png")
#: Below this many files the headers are probed in this process: spawning workers costs more.
_IN_PROCESS_BELOW = 512
_CHUNK = 256  # files per worker task: small enough for a smooth progress bar


def _probe_chunk(paths: list[str]) -> list[tuple[int, int, int, bool] | str]:
    """Each file's upright ``(height, width)``, EXIF orientation and whether it is a JPEG cut
    short (:func:`~._jpeg_ends.jpeg_cut_short`), or why it cannot be used."""
    out: list[tuple[int, int, int, bool] | str] = []
    for path in paths:
        try:
            out.append((*probe_image_header(path), file_cut_short(path)))
        except MediaError as exc:
            out.append(str(exc).removeprefix(f"{path}: "))
    return out


def _progress(total: int, progress: bool):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc="indexing images", unit="image",
                disable=None if progress else True)


def _probe_all(paths: list[str], num_workers: int, progress: bool) -> list:
    chunks = [paths[i:i + _CHUNK] for i in range(0, len(paths), _CHUNK)]
    results: list = []
    with _progress(len(paths), progress) as bar:
        if num_workers == 0:
            for chunk in chunks:
                results.extend(_probe_chunk(chunk))
                bar.update(len(chunk))
            return results
        ctx = multiprocessing.get_context("spawn")  # no fork: the parent may hold CUDA
        with ProcessPoolExecutor(max_workers=num_workers, mp_context=ctx) as pool:
            for chunk, done in zip(chunks, pool.map(_probe_chunk, chunks)):
                results.extend(done)
                bar.update(len(chunk))
    return results


def _scan(root: str, extensions: tuple[str, ...]) -> tuple[list[str], list[str], list[int]]:
    """Class folders (sorted), and every image file under each (sorted, relative to root)."""
    classes = sorted(e.name for e in os.scandir(root) if e.is_dir() and not e.name.startswith("."))
    files, labels = [], []
    for label, name in enumerate(classes):
        found = []
        for folder, dirs, names in os.walk(os.path.join(root, name)):
            dirs.sort()
            found += [os.path.join(folder, n) for n in names if n.lower().endswith(extensions)]
        for path in sorted(found):
            files.append(os.path.relpath(path, root))
            labels.append(label)
    return classes, files, labels


def _label(value) -> int:
    """An integer label (``operator.index``: no float truncated, no string parsed)."""
    try:
        return operator.index(value)
    except TypeError:
        raise ConfigError(f"ImageFiles: label {value!r} is not an integer; map class names to "
                          "numbers and pass the names as classes=") from None


class IndexedFiles(ImageDataset):
    """Image files with one label each, indexed by probing: what :class:`ImageFolder` and
    :class:`ImageFiles` share. Paths are stored relative to :attr:`root`."""

    def _index(self, root: str, files: list[str], labels: list[int], classes: list[str],
               num_workers: int | None, on_error: str, progress: bool) -> None:
        """Probe ``files`` (relative to ``root``, or absolute) and keep those that open; see
        the subclasses' docstrings for the attributes this sets.

        Raises:
            ConfigError: not one file opens (a wrong root or list, named by its first file).
        """
        self.root, self.classes = root, classes
        workers = _workers(num_workers, len(files))
        results = _probe_all([os.path.join(root, f) for f in files], workers, progress)
        keep = [i for i, r in enumerate(results) if not isinstance(r, str)]
        self.rejected = [(os.path.join(root, files[i]), r)
                         for i, r in enumerate(results) if isinstance(r, str)]
        if self.rejected and on_error == "raise":
            from ..errors import CorruptImageError

            path, reason = self.rejected[0]
            raise CorruptImageError(path, f"{reason} ({len(self.rejected)} bad files in all)")
        if not keep:
            path, reason = self.rejected[0]
            raise ConfigError(f"{type(self).__name__}: none of the {len(files)} files opens as an "
                              f"image (the first, {path}: {reason}); check the root folder and "
                              "the paths")
        if self.rejected:
            log.warning("%s: %d of %d files skipped (see .rejected)", type(self).__name__,
                        len(self.rejected), len(files))
        self._paths = np.array([files[i].encode() for i in keep], dtype=np.bytes_)
        self.labels = np.array([labels[i] for i in keep], dtype=np.int64)
        header = np.array([results[i] for i in keep], dtype=np.int64).reshape(-1, 4)
        self.sizes = np.ascontiguousarray(header[:, :2])
        self.orientations = header[:, 2].astype(np.int8)
        self.cut_short = header[:, 3].astype(bool)

    def path(self, i: int) -> str:
        """Absolute path of image ``i``."""
        return os.path.join(self.root, self._paths[i].decode())

    def describe(self, i: int) -> str:
        return self.path(i)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({self.root}: {len(self)} images, {len(self.classes)} "
                f"classes, {len(self.rejected)} rejected)")


def _check_on_error(on_error: str) -> None:
    if on_error not in ("skip", "raise"):
        raise ConfigError(f"on_error must be 'skip' or 'raise', got {on_error!r}")


_ATTRIBUTES = """root (str), classes (list[str]), labels (np.ndarray int64 ``[N]``), sizes
        (np.ndarray int64 ``[N, 2]``: upright height, width), orientations (np.ndarray int8
        ``[N]``: EXIF orientation 1-8, 1 for files without one, 0 for a tag that holds no
        such number), cut_short (np.ndarray bool ``[N]``: JPEGs whose last bytes are not their
        end-of-image marker, truncated or followed by other bytes; the GPU decoder hands
        those to Pillow), rejected (list of ``(path, reason)``)."""


class ImageFolder(IndexedFiles):
    """Images laid out ``root/<class>/**/<file>``, labelled by class folder (sorted names).

    Every file's header is read once (size and EXIF orientation), and its last bytes (is the
    JPEG cut short?), in spawned processes with a progress bar; pixels are decoded by the
    loader. Files Pillow cannot open are listed in :attr:`rejected` (``on_error="skip"``, the
    default) or raise. Truncated files open fine and fail when decoded: the loader's
    ``on_error`` handles those. The index describes the files as they were when it was made:
    build it again after changing them. For files listed with their labels instead (ImageNet's
    validation set, DALI's ``file_list``), see :class:`ImageFiles`.

    Args:
        root (str | PathLike): the dataset folder.
        extensions (sequence of str): file endings to take (case-insensitive); default
            ``.jpg``, ``.jpeg``, ``.png``.
        num_workers (int | None): probing processes; ``None``: one per core (in-process below
            512 files); ``0``: in this process. Scripts need the ``__main__`` guard.
        on_error ("skip" | "raise"): what a file that cannot be opened does.
        progress (bool): show a tqdm bar (only on a terminal).

    Attributes:
        {attributes}

    Raises:
        ConfigError: ``root`` is not a folder, has no class folder or no image.
        CorruptImageError: with ``on_error="raise"``, the first file that cannot be opened.
    """

    def __init__(self, root: str | os.PathLike, *, extensions: Sequence[str] = DEFAULT_IMAGE_EXTENSIONS,
                 num_workers: int | None = None, on_error: Literal["skip", "raise"] = "skip",
                 progress: bool = True) -> None:
        _check_on_error(on_error)
        root = os.path.abspath(os.fspath(root))
        if not os.path.isdir(root):
            raise ConfigError(f"ImageFolder: {root} is not a folder; give the folder that "
                              "holds one sub-folder per class")
        exts = tuple(e.lower() for e in extensions)
        classes, files, labels = _scan(root, exts)
        if not files:
            raise ConfigError(f"ImageFolder: no {'/'.join(exts)} files in class folders under "
                              f"{root} (found {len(classes)} class folders); the "
                              "layout is root/<class>/<image>")
        self._index(root, files, labels, classes, num_workers, on_error, progress)


if ImageFolder.__doc__:  # None under python -OO
    ImageFolder.__doc__ = ImageFolder.__doc__.format(attributes=_ATTRIBUTES)


class ImageFiles(IndexedFiles):
    """Image files named in a list, each with its label: ImageNet's validation set (one
    folder, labels in a separate file), a CSV of paths, DALI's ``file_list``. Indexed as
    :class:`ImageFolder` indexes its files (same attributes, same loader paths).

    Args:
        files (sequence of str | PathLike): the images; relative ones are taken under
            ``root``.
        labels (sequence of int): one label per file, ``0 <= label`` (integers only: map class
            names to numbers and give the names as ``classes``).
        classes (sequence of str | None): class names, ``labels`` indexing them; default
            ``"0"``, ``"1"``, ... up to the largest label.
        root (str | PathLike | None): the folder relative paths start from; default the
            current directory.
        num_workers, on_error, progress: as :class:`ImageFolder`'s.

    Attributes:
        {attributes}

    Raises:
        ConfigError: no files, as many labels as files not given, a negative label or one
            past ``classes``.
        CorruptImageError: with ``on_error="raise"``, the first file that cannot be opened.
    """

    def __init__(self, files: Sequence[str | os.PathLike], labels: Sequence[int], *,
                 classes: Sequence[str] | None = None, root: str | os.PathLike | None = None,
                 num_workers: int | None = None, on_error: Literal["skip", "raise"] = "skip",
                 progress: bool = True) -> None:
        _check_on_error(on_error)
        if isinstance(files, (str, bytes, os.PathLike)):
            raise ConfigError(f"ImageFiles: files is one path ({os.fspath(files)!r}), not a list "
                              "of them; for a file of '<path> <label>' lines use "
                              "ImageFiles.from_list")
        root = os.path.abspath(os.fspath(root) if root is not None else os.getcwd())
        files = [os.fspath(f) for f in files]  # joined to root when read: absolute ones stay
        labels = [_label(x) for x in labels]
        if not files:
            raise ConfigError("ImageFiles: no files given")
        if len(labels) != len(files):
            raise ConfigError(f"ImageFiles: {len(files)} files but {len(labels)} labels; give "
                              "one label per file")
        top = max(labels)
        classes = [str(k) for k in range(top + 1)] if classes is None else [str(c) for c in classes]
        if min(labels) < 0 or top >= len(classes):
            bad = min(labels) if min(labels) < 0 else top
            raise ConfigError(f"ImageFiles: label {bad} is outside the {len(classes)} classes "
                              f"(0 to {len(classes) - 1}); labels index classes")
        self._index(root, files, labels, classes, num_workers, on_error, progress)

    @classmethod
    def from_list(cls, list_file: str | os.PathLike, *, root: str | os.PathLike | None = None,
                  classes: Sequence[str] | None = None, **options) -> ImageFiles:
        """Files and labels from a text file of ``<path> <label>`` lines (DALI's
        ``file_list`` format, space- or tab-separated; blank lines and lines starting with
        ``#`` are skipped; a path may hold spaces inside it, not at its ends, and the label is
        the last field; a path cannot start with ``#``). Relative paths are taken under
        ``root``, by default the list file's folder. ``options``: as the constructor's.

        Raises:
            DatasetFormatError: a line that is not a path and an integer label (naming the
                file and the line).
        """
        from ..errors import DatasetFormatError

        list_file = os.fspath(list_file)
        files, labels = [], []
        with open(list_file, encoding="utf-8-sig") as f:  # -sig: a BOM is not a path
            for number, line in enumerate(f, 1):
                text = line.strip()
                if not text or text.startswith("#"):
                    continue
                path, label = (text.rsplit(None, 1) + [""])[:2]
                try:
                    value = int(label)
                except ValueError:
                    value = -1
                if not label or value < 0:
                    raise DatasetFormatError(list_file, f"line {number} is {text!r}, not "
                                             "'<path> <label>' with a label >= 0; fix or "
                                             "remove it")
                files.append(path)
                labels.append(value)
        if root is None:
            root = os.path.dirname(os.path.abspath(list_file))
        return cls(files, labels, classes=classes, root=root, **options)


if ImageFiles.__doc__:
    ImageFiles.__doc__ = ImageFiles.__doc__.format(attributes=_ATTRIBUTES)


def _workers(num_workers: int | None, num_files: int) -> int:
    if num_workers is None:
        return 0 if num_files < _IN_PROCESS_BELOW else min(os.cpu_count() or 1, num_files // _CHUNK + 1)
    if num_workers < 0:
        raise ConfigError(f"num_workers must be >= 0 (0 probes in this process), got {num_workers}")
    return num_workers
