"""CIFAR-10 and CIFAR-100 from their official files, python batches or binary, without
running a pickle's code.

The python batches are pickles of dicts holding lists, bytes and numpy arrays. Unpickling
runs whatever callables a pickle names, so :class:`_RestrictedUnpickler` admits exactly the
three numpy reconstructors (and ``_codecs.encode`` to latin-1, how protocol 2 writes
``bytes``) and refuses anything else with :class:`DatasetFormatError` naming the file.
"""

from __future__ import annotations

import codecs
import io
import os
import pickle
from pathlib import Path

import numpy as np

from ..errors import DatasetFormatError
from ._dataset import InMemoryImages

_SIDE, _PIXELS = 32, 3 * 32 * 32

#: (module, name) a CIFAR pickle may name: numpy's ndarray reconstruction (``numpy.core``
#: before numpy 2, ``numpy._core`` after), and nothing else.
_ALLOWED = {
    ("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
    ("numpy", "ndarray"), ("numpy", "dtype"),
}


def _latin1_encode(text: str, encoding: str = "utf-8") -> bytes:
    """``_codecs.encode`` as protocol-2 pickles of ``bytes`` call it, latin-1 only."""
    if encoding.lower().replace("-", "") != "latin1":
        raise pickle.UnpicklingError(f"_codecs.encode with encoding {encoding!r}")
    return codecs.encode(text, "latin1")


class _RestrictedUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        if (module, name) in _ALLOWED:
            return super().find_class(module, name)
        if (module, name) == ("_codecs", "encode"):
            return _latin1_encode
        raise pickle.UnpicklingError(f"refusing to load {module}.{name}")


def load_batch(path: str | os.PathLike) -> dict:
    """The dict of one CIFAR python batch file, keys decoded to ``str``.

    Raises:
        DatasetFormatError: the file is not a pickle of a dict, or names anything but
            numpy's array reconstructors (it would run code).
    """
    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            data = _RestrictedUnpickler(io.BytesIO(f.read()), encoding="bytes").load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError) as exc:
        raise DatasetFormatError(path, f"not a CIFAR python batch ({exc}); CIFAR batches "
                                 "hold only dicts, lists, bytes and numpy arrays") from exc
    if not isinstance(data, dict):
        raise DatasetFormatError(path, f"a CIFAR batch is a dict, this pickle holds a "
                                 f"{type(data).__name__}")
    return {k.decode("latin1") if isinstance(k, bytes) else k: v for k, v in data.items()}


def _pixels(raw, path: str) -> np.ndarray:
    """``[N, 3072]`` planar RGB rows → uint8 ``[N, 32, 32, 3]``."""
    array = np.asarray(raw)
    if array.dtype != np.uint8 or array.ndim != 2 or array.shape[1] != _PIXELS:
        raise DatasetFormatError(path, f"'data' must be uint8 [N, {_PIXELS}], got "
                                 f"{array.dtype} {array.shape}")
    return array.reshape(-1, 3, _SIDE, _SIDE).transpose(0, 2, 3, 1)


def _python_part(path: str, label_key: str) -> tuple[np.ndarray, np.ndarray]:
    batch = load_batch(path)
    if "data" not in batch or label_key not in batch:
        raise DatasetFormatError(path, f"a CIFAR batch needs keys 'data' and {label_key!r}, "
                                 f"found {sorted(batch)}")
    labels = np.asarray(batch[label_key], dtype=np.int64)
    return _pixels(batch["data"], path), labels


def _bin_part(path: str, label_bytes: int, label_at: int) -> tuple[np.ndarray, np.ndarray]:
    raw = np.fromfile(path, dtype=np.uint8)
    record = label_bytes + _PIXELS
    if raw.size == 0 or raw.size % record:
        raise DatasetFormatError(path, f"{raw.size} bytes is not a whole number of "
                                 f"{record}-byte CIFAR records")
    rows = raw.reshape(-1, record)
    return _pixels(rows[:, label_bytes:], path), rows[:, label_at].astype(np.int64)


def _names(meta: Path, key: str, txt: Path, fallback: int) -> list[str]:
    """Class names from the python ``meta`` pickle, else the binary format's text file, else
    the label numbers."""
    if meta.exists():
        names = load_batch(meta).get(key)
        if isinstance(names, list):
            return [n.decode() if isinstance(n, bytes) else str(n) for n in names]
    if txt.exists():
        return [line.strip() for line in txt.read_text().splitlines() if line.strip()]
    return [str(i) for i in range(fallback)]


def _find(root: Path, layouts: dict[str, str], first_file: dict[str, str]) -> tuple[Path, str]:
    """The folder holding the files, and its format (``"py"`` or ``"bin"``)."""
    for fmt, name in first_file.items():
        if (root / name).exists():
            return root, fmt
    for fmt, folder in layouts.items():
        if (root / folder / first_file[fmt]).exists():
            return root / folder, fmt
    expected = " or ".join(f"{root / f}/" for f in layouts.values())
    raise DatasetFormatError(str(root), f"no CIFAR files here: expected {expected} (the "
                             "official archives, extracted), or one of those folders itself")


def _load(parts, loader) -> tuple[np.ndarray, np.ndarray]:
    pixels, labels = zip(*(loader(str(p)) for p in parts))
    return np.ascontiguousarray(np.concatenate(pixels)), np.concatenate(labels)


class CIFAR10(InMemoryImages):
    """CIFAR-10: 50,000 training or 10,000 test images of 32×32, 10 classes, in memory.

    Args:
        root (str | PathLike): the folder holding ``cifar-10-batches-py/`` (or
            ``cifar-10-batches-bin/``), or that folder itself.
        train (bool): the five training batches (default) or the test batch.

    Raises:
        DatasetFormatError: no CIFAR files under ``root``, a malformed file, or a pickle that
            names anything but numpy arrays (it is never run).
    """

    _LAYOUTS = {"py": "cifar-10-batches-py", "bin": "cifar-10-batches-bin"}
    _FIRST = {"py": "data_batch_1", "bin": "data_batch_1.bin"}

    def __init__(self, root: str | os.PathLike, *, train: bool = True) -> None:
        folder, fmt = _find(Path(root), self._LAYOUTS, self._FIRST)
        stems = [f"data_batch_{i}" for i in range(1, 6)] if train else ["test_batch"]
        if fmt == "py":
            pixels, labels = _load([folder / s for s in stems], lambda p: _python_part(p, "labels"))
        else:
            pixels, labels = _load([folder / f"{s}.bin" for s in stems], lambda p: _bin_part(p, 1, 0))
        classes = _names(folder / "batches.meta", "label_names", folder / "batches.meta.txt", 10)
        super().__init__(pixels, labels, classes, str(folder))
        self.train = bool(train)


class CIFAR100(InMemoryImages):
    """CIFAR-100: 50,000 training or 10,000 test images of 32×32, in memory.

    Args:
        root (str | PathLike): the folder holding ``cifar-100-python/`` (or
            ``cifar-100-binary/``), or that folder itself.
        train (bool): the training file (default) or the test file.
        label ("fine" | "coarse"): the 100 fine classes (default) or the 20 superclasses.

    Raises:
        DatasetFormatError: as :class:`CIFAR10`; also for a bad ``label``.
    """

    _LAYOUTS = {"py": "cifar-100-python", "bin": "cifar-100-binary"}
    _FIRST = {"py": "train", "bin": "train.bin"}

    def __init__(self, root: str | os.PathLike, *, train: bool = True,
                 label: str = "fine") -> None:
        if label not in ("fine", "coarse"):
            raise DatasetFormatError(str(root), f"label must be 'fine' or 'coarse', got {label!r}")
        folder, fmt = _find(Path(root), self._LAYOUTS, self._FIRST)
        stem = "train" if train else "test"
        if fmt == "py":
            pixels, labels = _load([folder / stem], lambda p: _python_part(p, f"{label}_labels"))
        else:  # a record is <coarse byte><fine byte><3072 pixels>
            at = 1 if label == "fine" else 0
            pixels, labels = _load([folder / f"{stem}.bin"], lambda p: _bin_part(p, 2, at))
        count = 100 if label == "fine" else 20
        classes = _names(folder / "meta", f"{label}_label_names",
                         folder / f"{label}_label_names.txt", count)
        super().__init__(pixels, labels, classes, str(folder))
        self.train, self.label = bool(train), label
