"""NVIDIA's separation-decode index JSON: ``{"<video_dir>/": {"<clip_id>": frame_count}}``.

In PyNvVideoCodec's ``dataloader_separation_decode`` example a clip is a directory
``<video_dir>/<clip_id>/`` holding one MP4 per camera (``CAM_FRONT.mp4`` …), and the count is
the clip's number of frames. We also read a clip that is a single file
``<video_dir>/<clip_id>.mp4``.
"""

from __future__ import annotations

import json
import logging
import os
from collections import defaultdict
from typing import Literal

from ..constants import VIDEO_EXTENSIONS
from ..errors import ConfigError
from ._build import build_index
from ._record import VideoIndex
from ._store import AllowedRoots, confine_paths

logger = logging.getLogger(__name__)

Layout = Literal["clip_dirs", "files"]
NvJson = dict[str, dict[str, int]]


def _clip_of(path: str, layout: Layout) -> tuple[str, str]:
    """``(video_dir with trailing separator, clip_id)`` of one video file."""
    if layout == "files":  # <video_dir>/<clip_id>.<ext>
        directory, name = os.path.split(path)
        return os.path.join(directory, ""), os.path.splitext(name)[0]
    clip_dir = os.path.dirname(path)  # <video_dir>/<clip_id>/<camera>.<ext>
    return os.path.join(os.path.dirname(clip_dir), ""), os.path.basename(clip_dir)


def to_nvidia_json(index: VideoIndex, *, layout: Layout = "clip_dirs") -> NvJson:
    """Group the index into NVIDIA's ``{video_dir: {clip_id: frame_count}}`` mapping.

    Args:
        index: the indexed videos.
        layout: ``"clip_dirs"`` (NVIDIA's: each file is one camera of the clip named by its
            directory) or ``"files"`` (each file is a clip named by its stem).

    Returns:
        The mapping, keys sorted. A clip's count is the *smallest* frame count of its cameras,
        so that every frame number below it exists in every camera.
    """
    counts: dict[str, dict[str, int]] = defaultdict(dict)
    for record in index:
        video_dir, clip_id = _clip_of(record.path, layout)
        previous = counts[video_dir].get(clip_id, record.num_frames)
        counts[video_dir][clip_id] = min(previous, record.num_frames)
    return {d: dict(sorted(clips.items())) for d, clips in sorted(counts.items())}


def write_nvidia_json(
    index: VideoIndex, path: str | os.PathLike, *, layout: Layout = "clip_dirs"
) -> None:
    """Write :func:`to_nvidia_json` of ``index`` to ``path`` (atomically, indented JSON)."""
    path = os.fspath(path)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(to_nvidia_json(index, layout=layout), f, indent=2)
        f.write("\n")
    os.replace(tmp, path)


def _read_source(source: str | os.PathLike | NvJson) -> tuple[NvJson, str]:
    """The mapping, and the directory that relative ``video_dir`` keys are relative to."""
    if isinstance(source, dict):
        return source, os.getcwd()
    path = os.fspath(source)
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        raise ConfigError(
            f"{path}: expected NVIDIA's index JSON {{\"video_dir\": {{\"clip_id\": frames}}}}, "
            f"got {type(data).__name__} at the top level or a non-object value"
        )
    return data, os.path.dirname(os.path.abspath(path))


def _clip_target(clip_path: str, extensions: tuple[str, ...]) -> tuple[str, Layout]:
    """The directory or single file that holds a clip, and which layout that is."""
    if os.path.isdir(clip_path):
        return clip_path, "clip_dirs"
    for ext in extensions:
        if os.path.isfile(clip_path + ext):
            return clip_path + ext, "files"
    return clip_path, "clip_dirs"  # missing: build_index rejects it with the reason


def from_nvidia_json(source: str | os.PathLike | NvJson, *, allow_outside_root: AllowedRoots = False,
                     **build_kwargs) -> VideoIndex:
    """Index every camera file of every clip listed in NVIDIA's index JSON.

    Relative ``video_dir`` keys are taken relative to the JSON file's directory (or to the
    working directory when ``source`` is a dict). A clip whose indexed frame count (smallest
    over its cameras) differs from the JSON's logs a warning naming the clip and both counts.
    Every clip must lie under that directory: a ``video_dir`` or clip id with ``..`` or an
    absolute path elsewhere raises :class:`PathOutsideRootError` before any file is opened.

    Args:
        source: path of the JSON file, or the already parsed mapping.
        allow_outside_root: ``True`` accepts clips anywhere; a list accepts clips under the
            folders it names as well (default ``False``: only the JSON's directory).
        **build_kwargs: passed to :func:`build_index` (``num_workers``, ``progress`` …);
            ``recursive`` defaults to ``False`` (cameras sit directly in the clip directory).

    Returns:
        The :class:`VideoIndex` of all the clips' files; missing clips are in ``rejected``.
    """
    data, base = _read_source(source)
    build_kwargs.setdefault("recursive", False)
    extensions = tuple(build_kwargs.get("extensions", VIDEO_EXTENSIONS))
    targets: list[str] = []
    expected: dict[tuple[str, str], int] = {}
    layouts: dict[str, Layout] = {}
    for video_dir, clips in data.items():
        directory = os.path.join(base, video_dir)
        for clip_id, frames in clips.items():
            target, layout = _clip_target(os.path.join(directory, clip_id), extensions)
            targets.append(target)
            layouts[os.path.abspath(target)] = layout
            expected[(os.path.join(os.path.abspath(directory), ""), clip_id)] = int(frames)
    where = "the index JSON (a dict)" if isinstance(source, dict) else os.fspath(source)
    confine_paths([os.path.normpath(os.path.abspath(t)) for t in targets], base,
                  allow_outside_root, source=where)
    index = build_index(targets, **build_kwargs)
    _check_counts(index, expected, layouts)
    return index


def _check_counts(
    index: VideoIndex, expected: dict[tuple[str, str], int], layouts: dict[str, Layout]
) -> None:
    found: dict[tuple[str, str], int] = {}
    for record in index:
        layout = layouts.get(record.path, "clip_dirs")
        key = _clip_of(record.path, layout)
        found[key] = min(found.get(key, record.num_frames), record.num_frames)
    for (video_dir, clip_id), frames in expected.items():
        got = found.get((video_dir, clip_id))
        if got is None:
            logger.warning("clip %s%s: no readable video (see index.rejected)", video_dir, clip_id)
        elif got != frames:
            logger.warning(
                "clip %s%s: the JSON says %d frames, the videos have %d (smallest over cameras)",
                video_dir, clip_id, frames, got,
            )
