"""The benchmark workloads: which frames every batch holds, and what shape it is delivered in.

A workload is defined once and shared by every backend: vidloader's own sampler plans the
batches, and the peers receive exactly the same (video, frames) requests, so every backend
decodes the same frames of the same files and delivers batches of the same shape.

==============  ===========  =====================================================================
workload        dataset      batch
==============  ===========  =====================================================================
random          W1           128 uniformly random frames, resized to 224×224
clips           W4           8 clips of 16 frames, stride 2; short side 128, centre crop 112
clips-head      W4           8 clips: each video's first 16 frames (SPDL decodes the first 0.5 s)
sequential      W1           128 frames in stream order (the ceiling of any sampler)
multicam-stream W3           8 (clip, frame) samples × 6 cameras, stream order, native size
multicam-random W3           8 (clip, frame) samples × 6 cameras, random access, native size
relaxed         W1           vidloader.GopShuffle (GOP-local random), 128 frames, 224×224
==============  ===========  =====================================================================
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from typing import TYPE_CHECKING

from .._utils._files import link_or_copy
from ..index import VideoIndex
from ..sampling import BatchPlan, Clips, RandomFrames, Sampler, SequentialFrames
from ._multicam import multicam_sampler

if TYPE_CHECKING:
    from ..processing import Process


class Skip(Exception):
    """A run that cannot happen here; the message says why (``skipped: <why>`` in reports)."""


@dataclasses.dataclass(frozen=True)
class Geometry:
    """What every backend does to a decoded frame: resize, then centre crop.

    Attributes:
        size ((int, int) | None): resize to exactly ``(height, width)``.
        short_side (int | None): resize so the short side has this length (aspect kept).
        crop ((int, int) | None): centre crop ``(height, width)`` after the resize.
    """

    size: tuple[int, int] | None = None
    short_side: int | None = None
    crop: tuple[int, int] | None = None

    def resized(self, height: int, width: int) -> tuple[int, int]:
        """``(height, width)`` after the resize step, for a ``height × width`` source."""
        if self.size is not None:
            return self.size
        if self.short_side is not None:
            s = self.short_side / min(height, width)
            return max(1, round(height * s)), max(1, round(width * s))
        return height, width

    def output(self, height: int, width: int) -> tuple[int, int]:
        """``(height, width)`` delivered for a ``height × width`` source."""
        return self.crop or self.resized(height, width)

    def process(self) -> Process:
        """The same geometry as a vidloader :class:`Process`."""
        from ..processing import Process

        if self.short_side is not None:
            return Process(short_side=self.short_side, size=self.crop, crop="center")
        return Process(size=self.size)


@dataclasses.dataclass(frozen=True)
class Workload:
    """One benchmark workload.

    Attributes:
        name (str): its name on the command line.
        description (str): one line for reports.
        dataset (str): default dataset (``W1``, ``W3``, ``W4``).
        batch_size (int): rows of the loader's batch (samples, or samples × cameras).
        geometry (Geometry): resize and crop of every frame.
        make_sampler (Callable): ``(index, dataset, samples_needed, seed) -> Sampler``.
        cameras (int): rows per sample (``> 1``: batches reshape to ``groups × cameras``).
        repeat_index (bool): when one epoch is shorter than the run, list the videos several
            times (as the exercise duplicates its video 200 times), so the run is one epoch.
    """

    name: str
    description: str
    dataset: str
    batch_size: int
    geometry: Geometry
    make_sampler: Callable[..., Sampler]
    cameras: int = 1
    repeat_index: bool = False
    #: Repeats of the index name hard links of the files, one folder per repeat, not the files
    #: themselves: decoders and caches that key on the path see new videos.
    distinct_repeats: bool = False


def _uniform(cls, index, needed: int, seed: int, **options) -> Sampler:
    """A sampler whose single epoch holds ``needed`` samples: a truncated permutation when the
    dataset is large enough, i.i.d. uniform draws when it is not (tiny datasets)."""
    total = cls(seed=seed, **options).num_samples(index)
    replacement = needed > total
    return cls(seed=seed, num_samples=needed, replacement=replacement, **options)


def _random(index, dataset, needed: int, seed: int) -> Sampler:
    return _uniform(RandomFrames, index, needed, seed)


def _clips(index, dataset, needed: int, seed: int) -> Sampler:
    return _uniform(Clips, index, needed, seed, sequence_length=16, stride=2, step=1)


#: Seconds at the head of each video the ``clips-head`` workload samples from. SPDL's Kinetics
#: benchmark (21,890 frames/s on 8 H100) decodes only each video's first 0.5 s; a 16-frame clip
#: at 30 frames/s spans 0.53 s, so 0.6 s holds it (and ``step`` keeps one clip per video).
HEAD_SECONDS = 0.6
#: ``Clips`` options of the ``clips-head`` workload: each video's first 16 frames, one clip
#: per video (``step`` past any video's length).
HEAD_CLIPS = dict(sequence_length=16, stride=1, step=10**6, first_seconds=HEAD_SECONDS)


def _clips_head(index, dataset, needed: int, seed: int) -> Sampler:
    """One clip per video (its first 16 frames), each once per epoch: no draws with
    replacement, whose repeated clips in a batch would be decoded once. A small dataset's
    index is repeated instead, each repeat under paths of its own (``distinct_repeats``), so
    no cache keyed by path serves a repeat: every clip is decoded as a new video's would be,
    as over Kinetics' 240k videos."""
    total = Clips(seed=seed, **HEAD_CLIPS).num_samples(index)
    return Clips(seed=seed, num_samples=min(needed, total), **HEAD_CLIPS)


def _sequential(index, dataset, needed: int, seed: int) -> Sampler:
    return SequentialFrames(num_samples=min(needed, index.total_frames), seed=seed)


def _gop_shuffle(index, dataset, needed: int, seed: int) -> Sampler:
    import vidloader

    from .. import sampling

    cls = getattr(vidloader, "GopShuffle", None) or getattr(sampling, "GopShuffle", None)
    if cls is None:
        raise Skip("vidloader.GopShuffle (the relaxed GOP-local sampler) does not exist yet")
    return cls(seed=seed)


def rig_positions(index, dataset) -> list[list[int]]:
    """Each multi-camera clip (rig) of ``dataset`` as its camera files' positions in ``index``.

    Raises:
        Skip: the dataset has no rigs, or a camera file is not in the index.
    """
    if not dataset.clips:
        raise Skip(f"dataset {dataset.spec.name} has no multi-camera clips (use W3)")
    position = {p: i for i, p in enumerate(index.paths)}
    try:
        return [[position[os.path.abspath(p)] for p in clip] for clip in dataset.clips]
    except KeyError as exc:
        raise Skip(f"camera file {exc} is not in the index") from None


def _multicam(order: str) -> Callable[..., Sampler]:
    def make(index, dataset, needed: int, seed: int) -> Sampler:
        clips = rig_positions(index, dataset)
        cams = len(clips[0])
        return multicam_sampler(clips, order=order, num_samples=needed // cams, seed=seed)
    return make


_FRAME = Geometry(size=(224, 224))
WORKLOADS: dict[str, Workload] = {w.name: w for w in [
    Workload("random", "uniform random frames, batch 128, 224x224", "W1", 128, _FRAME, _random),
    Workload("clips", "random clips of 16 frames, stride 2, batch 8; short side 128, crop 112",
             "W4", 8, Geometry(short_side=128, crop=(112, 112)), _clips),
    Workload("clips-head", "each video's first 16 frames as one clip (within its first 0.6 s; "
             "SPDL's Kinetics benchmark decodes the first 0.5 s), batch 8; short side 128, crop 112",
             "W4", 8, Geometry(short_side=128, crop=(112, 112)), _clips_head, repeat_index=True,
             distinct_repeats=True),
    Workload("sequential", "all frames in stream order, batch 128, 224x224 (the ceiling)", "W1",
             128, _FRAME, _sequential, repeat_index=True),
    Workload("multicam-stream", "6 cameras at the same frame, stream order, 8 clips x 6 cams, "
             "native size", "W3", 48, Geometry(), _multicam("stream"), cameras=6),
    Workload("multicam-random", "6 cameras at the same frame, random access, 8 clips x 6 cams, "
             "native size", "W3", 48, Geometry(), _multicam("random"), cameras=6),
    Workload("relaxed", "vidloader.GopShuffle: GOP-local random frames, batch 128, 224x224",
             "W1", 128, _FRAME, _gop_shuffle, repeat_index=True),
]}

#: Names that expand to several workloads on the command line.
ALIASES = {"multicam": ["multicam-stream", "multicam-random"], "all": list(WORKLOADS)}


def resolve_workloads(names: str) -> list[Workload]:
    """Workloads from a comma-separated list of names or aliases.

    Raises:
        ValueError: an unknown name.
    """
    out: list[Workload] = []
    for name in (n.strip() for n in names.split(",") if n.strip()):
        for real in ALIASES.get(name, [name]):
            if real not in WORKLOADS:
                choices = ", ".join([*WORKLOADS, *ALIASES])
                raise ValueError(f"unknown workload {real!r}; choose from {choices}")
            if WORKLOADS[real] not in out:
                out.append(WORKLOADS[real])
    return out


@dataclasses.dataclass
class Plan:
    """The batches of one run, shared by every backend.

    Attributes:
        index: the index the plans refer to (the dataset's, or it repeated; see
            :attr:`Workload.repeat_index`).
        sampler (Sampler): vidloader's sampler (the peers get its batch plans).
        batches (list[BatchPlan]): warm-up batches first, then the timed ones.
        batch_size (int): rows per batch.
        repeats (int): how many times the index lists each video.
    """

    index: object
    sampler: Sampler
    batches: list[BatchPlan]
    batch_size: int
    repeats: int = 1

    @property
    def samples_per_batch(self) -> int:
        """The loader's ``batch_size``: samples, each filling ``rows_per_sample`` rows."""
        return self.batch_size // self.sampler.rows_per_sample


def _linked_repeats(index, repeats: int) -> VideoIndex:
    """``index`` ``repeats`` times, repeat ``k > 0`` under hard links in ``.repeat-k/`` beside
    each file (a copy where the file system refuses links), made once and kept."""
    records = list(index)
    for k in range(1, repeats):
        for r in index:
            link = os.path.join(os.path.dirname(r.path), f".repeat-{k}", os.path.basename(r.path))
            link_or_copy(r.path, link)
            records.append(dataclasses.replace(r, path=link))
    return VideoIndex(records)


def make_plan(workload: Workload, index, dataset, *, batches: int, seed: int = 0,
              batch_size: int | None = None) -> Plan:
    """Plan ``batches`` full batches of ``workload`` over ``index``.

    When one epoch holds fewer batches, the index is repeated for stream-order workloads
    (:attr:`Workload.repeat_index`); otherwise the next epochs follow, as a training loop
    would see them.

    Raises:
        Skip: the workload does not apply (no multi-camera clips, no GopShuffle yet).
    """
    size = batch_size or workload.batch_size
    if size % workload.cameras:
        raise Skip(f"batch size {size} is not a multiple of {workload.cameras} cameras")
    sampler = workload.make_sampler(index, dataset, batches * size, seed)
    samples = size // sampler.rows_per_sample  # a multi-camera batch_size counts samples
    repeats = 1
    if workload.repeat_index:
        # enough repeats for one epoch of `batches` full batches
        repeats = max(1, -(-batches * samples // max(1, sampler.num_samples(index))))
        if repeats > 1:
            index = (_linked_repeats(index, repeats) if workload.distinct_repeats
                     else VideoIndex(list(index) * repeats))
            sampler = workload.make_sampler(index, dataset, batches * size, seed)
    plans: list[BatchPlan] = []
    epoch = 0
    while len(plans) < batches:
        epoch_plan = sampler.plan_epoch(index, epoch=epoch, batch_size=samples, drop_last=True)
        if len(epoch_plan) == 0:
            raise Skip(f"the dataset holds no full batch of {size} for {workload.name}")
        plans.extend(epoch_plan.batch(b) for b in range(min(len(epoch_plan), batches - len(plans))))
        epoch += 1
    return Plan(index, sampler, plans, size, repeats)
