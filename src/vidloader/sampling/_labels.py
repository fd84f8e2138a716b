"""Per-video labels from whatever the user has: a list, a dict by path, or a function."""

from __future__ import annotations

import operator
import os
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from ..errors import ConfigError
from ..index import VideoIndex

Labels = Sequence[int] | np.ndarray | Mapping[str, int] | Callable[[str], int]


def resolve_labels(index: VideoIndex, labels: Labels | None) -> np.ndarray | None:
    """One int64 label per video of ``index``, in index order.

    Args:
        index (VideoIndex): the videos (only ``len(index)`` and ``index[k].path`` are used).
        labels: ``None`` (no labels); a sequence or array aligned with the index's videos; a
            mapping from path (as stored in the index) to label; or a callable ``f(path)``.

    Returns:
        np.ndarray | None: int64 ``[len(index)]`` labels, or ``None`` if ``labels`` is.

    Raises:
        ConfigError: a length mismatch, a path with no label, or a label that is not an int.
    """
    if labels is None:
        return None
    if isinstance(labels, (str, bytes)):
        raise ConfigError(f"labels must be a sequence, a mapping or a callable, not {labels!r}")
    if isinstance(labels, Mapping):
        return _from_mapping(_paths(index), labels)
    if callable(labels):
        paths = _paths(index)
        return _as_int64([labels(p) for p in paths], paths, "labels(path)")
    return _from_sequence(index, labels)


def _paths(index: VideoIndex) -> list[str]:
    return [index[k].path for k in range(len(index))]


def _from_sequence(index: VideoIndex, labels) -> np.ndarray:
    try:
        count = len(labels)
    except TypeError:
        raise ConfigError(
            f"labels must be a sequence, a mapping or a callable, got {type(labels).__name__}"
        ) from None
    if count != len(index):
        raise ConfigError(
            f"labels has {count} entries but the index has {len(index)} videos; pass one label "
            f"per video in index order (or a dict keyed by path)"
        )
    if isinstance(labels, np.ndarray) and labels.ndim == 1 and labels.dtype.kind in "biu":
        return labels.astype(np.int64)  # fast path for large label arrays
    return _as_int64(list(labels), None, "labels")


def _from_mapping(paths: list[str], labels: Mapping) -> np.ndarray:
    by_path = {os.fspath(k): v for k, v in labels.items()}
    missing = [p for p in paths if p not in by_path]
    if missing:
        raise ConfigError(
            f"labels has no entry for {len(missing)} of {len(paths)} videos, e.g. {missing[0]!r};"
            f" key the dict by the paths stored in the index (index.paths)"
        )
    return _as_int64([by_path[p] for p in paths], paths, "labels[path]")


def _as_int64(values: list, paths: list[str] | None, source: str) -> np.ndarray:
    out = np.empty(len(values), dtype=np.int64)
    for k, value in enumerate(values):
        try:
            # operator.index accepts ints, numpy integers and 0-d integer arrays or tensors,
            # and refuses floats: 2.7 must not silently become class 2.
            out[k] = operator.index(value.item() if isinstance(value, np.bool_) else value)
        except TypeError:
            where = f" for {paths[k]!r}" if paths else f" at position {k}"
            raise ConfigError(
                f"{source} gave {value!r} ({type(value).__name__}){where}; labels must be "
                f"integers (class ids)"
            ) from None
    return out
