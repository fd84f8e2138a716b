"""The benchmark datasets W1, W3 and W4: synthetic, deterministic, cached by a hash of their specs.

* **W1**, the dataloader exercise: many 1080p H.264 videos, 10 s at 30 fps, GOP 30 with
  B-frames, about 12 Mbit/s.
* **W3**, NVIDIA's separation example (nuScenes-like): clips of 6 cameras, one directory per clip
  holding ``CAM_*.mp4``, HEVC 1600×900, GOP 30, no B-frames.
* **W4**, Kinetics-like: 10 s H.264 clips at 340p (454×340) and 720p, GOP 250 (as YouTube
  encodes them), with B-frames.

A *scale* shrinks (``tiny``, ``small``) or keeps (``full``) the number of videos, the duration
and the resolution, so the same workloads run in CI, on a 2-core laptop and on a GPU server.
Bitrates scale with the pixel count, so bits per pixel (and so decode cost per pixel) stay put.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
from pathlib import Path

from ..synthetic import VideoSpec

#: Bump when the painter or the encoder settings change, so cached datasets are rebuilt.
GENERATOR_VERSION = 1

SCALES = ("tiny", "small", "gpu-quick", "gpu", "full")
DATASETS = ("W1", "W3", "W4")
CAMERAS = (
    "CAM_FRONT", "CAM_FRONT_LEFT", "CAM_FRONT_RIGHT", "CAM_BACK", "CAM_BACK_LEFT", "CAM_BACK_RIGHT",
)


@dataclasses.dataclass(frozen=True)
class Scale:
    """How a scale shrinks a full dataset.

    Attributes:
        videos (float): fraction of the full number of videos (or clips), at least 2 kept.
        seconds (float): duration of every video, in seconds.
        resolution (float): linear factor on width and height.
    """

    videos: float
    seconds: float
    resolution: float


#: Per dataset, per scale. ``tiny`` is for tests and CI (seconds), ``small`` for a 2-core
#: machine (minutes), ``gpu`` for one call on the lent GPU machine (full resolution and video
#: count, shorter videos: generation must fit the call), ``full`` is the real thing.
_SCALES: dict[str, dict[str, Scale]] = {
    "W1": {"tiny": Scale(0.03, 2, 0.25), "small": Scale(0.08, 4, 0.5),
           "gpu-quick": Scale(0.5, 2, 1), "gpu": Scale(1, 3, 1),
           "full": Scale(1, 10, 1)},
    "W3": {"tiny": Scale(0.2, 2, 0.25), "small": Scale(0.4, 8, 0.5),
           "gpu-quick": Scale(0.5, 2, 1), "gpu": Scale(1, 4, 1),
           "full": Scale(1, 200 / 12, 1)},
    # 340p at 1/4 would be smaller than the 224 output: W4 stops at half resolution.
    "W4": {"tiny": Scale(0.02, 2, 0.5), "small": Scale(0.06, 4, 0.5),
           "gpu-quick": Scale(0.1, 4, 1), "gpu": Scale(0.25, 10, 1),
           "full": Scale(1, 10, 1)},
}


@dataclasses.dataclass(frozen=True)
class DatasetSpec:
    """A benchmark dataset before generation.

    Attributes:
        name (str): ``"W1"``, ``"W3"`` or ``"W4"``.
        scale (str): ``"tiny"``, ``"small"`` or ``"full"``.
        description (str): one line for reports.
        files (tuple[tuple[str, VideoSpec], ...]): relative path and spec of every video.
        cameras (int): files per multi-camera clip (one directory each); 0 for single videos.
    """

    name: str
    scale: str
    description: str
    files: tuple[tuple[str, VideoSpec], ...]
    cameras: int = 0

    def digest(self) -> str:
        """Short hash of everything that determines the bytes of the dataset."""
        payload = {
            "generator": GENERATOR_VERSION,
            "files": [[rel, dataclasses.asdict(spec)] for rel, spec in self.files],
        }
        blob = json.dumps(payload, sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:12]


@dataclasses.dataclass(frozen=True)
class Dataset:
    """A generated dataset on disk.

    Attributes:
        spec (DatasetSpec): what was generated.
        root (Path): its directory.
        paths (list[Path]): every video, in spec order.
        clips (list[list[Path]]): for multi-camera datasets, the camera files of each clip
            (in :data:`CAMERAS` order); empty otherwise.
    """

    spec: DatasetSpec
    root: Path
    paths: list[Path]
    clips: list[list[Path]]

    def summary(self) -> dict:
        """JSON-able facts for the report."""
        specs = [s for _, s in self.spec.files]
        sizes = sorted({f"{s.width}x{s.height}" for s in specs})
        return {
            "name": self.spec.name, "scale": self.spec.scale,
            "description": self.spec.description, "videos": len(self.paths),
            "clips": len(self.clips), "sizes": sizes,
            "codecs": sorted({s.codec for s in specs}),
            "frames_per_video": sorted({s.num_frames for s in specs}),
            "gop": sorted({s.gop for s in specs}), "bframes": sorted({s.bframes for s in specs}),
            "gops": sum(-(-s.num_frames // s.gop) for s in specs),
            "frames": sum(s.num_frames for s in specs),
            "bytes": sum(p.stat().st_size for p in self.paths if p.exists()),
            "digest": self.spec.digest(), "root": str(self.root),
        }


def _even(x: float) -> int:
    return max(16, int(round(x / 2)) * 2)


def _count(full: int, scale: Scale) -> int:
    return max(2, int(round(full * scale.videos)))


def _w1(scale: Scale) -> list[tuple[str, VideoSpec]]:
    f = scale.resolution
    w, h = _even(1920 * f), _even(1080 * f)
    spec = dict(
        codec="h264", width=w, height=h, num_frames=int(30 * scale.seconds), fps=30, gop=30,
        bframes=2, bitrate=int(12_000_000 * f * f),
    )
    return [(f"video_{i:04d}.mp4", VideoSpec(seed=i, **spec)) for i in range(_count(200, scale))]


def _w3(scale: Scale) -> list[tuple[str, VideoSpec]]:
    f = scale.resolution
    spec = dict(
        codec="hevc", width=_even(1600 * f), height=_even(900 * f),
        num_frames=int(round(12 * scale.seconds)), fps=12, gop=30, bframes=0,
        bitrate=int(4_000_000 * f * f),
    )
    files = []
    for c in range(_count(10, scale)):
        for k, cam in enumerate(CAMERAS):
            files.append((f"clip_{c:03d}/{cam}.mp4", VideoSpec(seed=1000 + 10 * c + k, **spec)))
    return files


def _w4(scale: Scale) -> list[tuple[str, VideoSpec]]:
    # Kinetics mixes resolutions; 4 in 5 of these are 340p, the rest 720p.
    f, n = scale.resolution, _count(300, scale)
    files = []
    for i in range(n):
        big = i % 5 == 4
        w, h, rate = (1280, 720, 2_500_000) if big else (454, 340, 700_000)
        spec = VideoSpec(
            codec="h264", width=_even(w * f), height=_even(h * f),
            num_frames=int(30 * scale.seconds), fps=30, gop=250, bframes=2,
            bitrate=int(rate * f * f), seed=2000 + i,
        )
        files.append((f"{'720p' if big else '340p'}/video_{i:04d}.mp4", spec))
    return files


_DESCRIPTIONS = {
    "W1": "exercise: H.264 1080p, 10 s @30 fps, GOP 30, B-frames, ~12 Mbit/s",
    "W3": "separation example: 6-camera clips, HEVC 1600x900, GOP 30, no B-frames",
    "W4": "Kinetics-like: H.264 10 s clips at 340p and 720p, GOP 250, B-frames",
}
_BUILDERS = {"W1": _w1, "W3": _w3, "W4": _w4}


def dataset_spec(name: str, scale: str = "tiny") -> DatasetSpec:
    """The spec of dataset ``name`` at ``scale``.

    Raises:
        ValueError: unknown dataset or scale.
    """
    name = name.upper()
    if name not in _BUILDERS:
        raise ValueError(f"unknown dataset {name!r}; choose from {', '.join(DATASETS)}")
    if scale not in SCALES:
        raise ValueError(f"unknown scale {scale!r}; choose from {', '.join(SCALES)}")
    sc = _SCALES[name][scale]
    desc = f"{_DESCRIPTIONS[name]} (scale {scale}: x{sc.resolution} resolution, {sc.seconds:g} s)"
    files = tuple(_BUILDERS[name](sc))
    return DatasetSpec(name, scale, desc, files, cameras=len(CAMERAS) if name == "W3" else 0)


def default_data_dir() -> Path:
    """``$VIDLOADER_BENCH_DATA`` or ``~/.cache/vidloader/bench``."""
    env = os.environ.get("VIDLOADER_BENCH_DATA")
    return Path(env) if env else Path.home() / ".cache" / "vidloader" / "bench"


def prepare_dataset(
    name: str, scale: str = "tiny", *, data_dir: str | os.PathLike | None = None,
    num_workers: int | None = None, progress: bool = False,
) -> Dataset:
    """Generate dataset ``name`` at ``scale`` unless a copy with the same hash exists.

    Args:
        name: ``"W1"``, ``"W3"`` or ``"W4"``.
        scale: ``"tiny"``, ``"small"`` or ``"full"``.
        data_dir: parent directory of the cached datasets (default :func:`default_data_dir`).
        num_workers: encoding processes (default: one per core).
        progress: show a progress bar while generating.

    Returns:
        The :class:`Dataset`; its directory is ``data_dir/<name>-<scale>-<hash>``.
    """
    spec = dataset_spec(name, scale)
    parent = Path(data_dir or default_data_dir()).absolute()
    root = parent / f"{spec.name}-{spec.scale}-{spec.digest()}"
    manifest = root / "dataset.json"
    paths = [root / rel for rel, _ in spec.files]
    if not (manifest.exists() and all(p.exists() for p in paths)):
        # Encode into a scratch directory and rename it: an interrupted run leaves no
        # truncated file that a later run would take for a finished one.
        scratch = root.with_name(root.name + ".partial")
        shutil.rmtree(scratch, ignore_errors=True)
        _generate(scratch, spec, num_workers, progress)
        (scratch / "dataset.json").write_text(json.dumps({
            "name": spec.name, "scale": spec.scale, "digest": spec.digest(),
            "files": [[rel, dataclasses.asdict(s)] for rel, s in spec.files],
        }, indent=1))
        shutil.rmtree(root, ignore_errors=True)
        os.replace(scratch, root)
    return Dataset(spec, root, paths, _clips(paths, spec.cameras))


def _clips(paths: list[Path], cameras: int) -> list[list[Path]]:
    if not cameras:
        return []
    return [paths[i : i + cameras] for i in range(0, len(paths), cameras)]


def _generate(root: Path, spec: DatasetSpec, num_workers: int | None, progress: bool) -> None:
    names = [rel for rel, _ in spec.files]
    specs = [s for _, s in spec.files]
    try:
        import tqdm  # noqa: F401  (make_dataset's progress bar)
    except ImportError:  # a bare GPU image: encode one by one, silently
        from ..synthetic import make_video

        for rel, s in spec.files:
            make_video(root / rel, s)
        return
    from ..synthetic import make_dataset

    make_dataset(root, specs, names=names, num_workers=num_workers, progress=progress)


def load_index(dataset: Dataset, *, progress: bool = False):
    """The dataset's :class:`~vidloader.VideoIndex`, built once and kept beside the videos."""
    from ..index import VideoIndex, build_index

    path = dataset.root / "index.vlindex.npz"
    if path.exists():
        index = VideoIndex.load(path)
        if sorted(index.paths) == sorted(str(p) for p in dataset.paths):
            return index
    index = build_index([str(p) for p in dataset.paths], progress=progress)
    if index.rejected:
        raise RuntimeError(f"{dataset.root}: {len(index.rejected)} generated videos could not "
                           f"be indexed, e.g. {index.rejected[0]}")
    index.save(path)
    return index
