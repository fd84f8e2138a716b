"""One adapter per backend under test, all on the same contract.

A peer receives a :class:`Job` (the index, the shared plan of batches, the workload, the number
of workers) and yields the plan's batches, in order, as uint8 tensors of the workload's shape
(a decode-only *ceiling* peer yields frame counts instead). Each adapter imports its library
lazily and raises :class:`Skip` (``skipped: <why>`` in reports) when it cannot run here.

CPU peers run under ``torch.utils.data.DataLoader`` with the same number of ``spawn`` workers as
vidloader. This module holds vidloader itself and the exercise's naive loader; decord, OpenCV
and torchcodec are in :mod:`._peers_cpu`, the GPU peers in :mod:`._peers_gpu`.
"""

from __future__ import annotations

import abc
import dataclasses
import importlib.metadata
from collections.abc import Iterator

import numpy as np
import torch

from ._batching import data_loader, resize_torch
from ._workloads import Geometry, Plan, Skip, Workload


@dataclasses.dataclass
class Job:
    """Everything a peer needs for one run.

    Attributes:
        index: the :class:`~vidloader.VideoIndex` of the dataset.
        plan (Plan): the batches (warm-up first), shared by every peer.
        workload (Workload): geometry and shape.
        workers (int): worker processes (or threads, for the NVDEC ceiling).
        device (str | None): where batches must end up (``None``: where the peer leaves them).
        memory_budget (str | None): the GPU loaders' ``memory_budget`` (``None``: none).
    """

    index: object
    plan: Plan
    workload: Workload
    workers: int
    device: str | None = None
    memory_budget: str | None = None


class Peer(abc.ABC):
    """Base of the adapters. Subclasses set :attr:`name` and implement :meth:`batches`."""

    #: Name on the command line and in reports.
    name = ""
    #: Distribution whose version the report records.
    library = ""
    #: A decode-only upper bound, not a loader: excluded from the "best peer" ratio.
    ceiling = False
    #: One line shown under the table.
    note = ""

    def check(self) -> None:
        """Raise :class:`Skip` when the backend cannot run here (library missing …)."""

    @abc.abstractmethod
    def batches(self, job: Job) -> Iterator[torch.Tensor | int]:
        """Yield the plan's batches in order (or frame counts, for a ceiling)."""

    def settings(self) -> dict | None:
        """How the adapter configures its library (JSON-able; ``peer_settings`` in reports),
        where it has choices a reader of the figures should know."""
        return None

    def counters(self) -> dict | None:
        """Cumulative ``decoded`` / ``delivered`` frame counts, where the backend tells."""
        return None

    def memory_plan(self) -> dict | None:
        """The backend's planned GPU memory (``VideoLoader.memory_plan``), where it has one."""
        return None

    def pipeline(self, job: Job) -> tuple[int, int]:
        """``(depth, cycle)``: batches the backend may decode ahead of the consumer, and
        batches it delivers per production cycle (all workers finishing one unit each).

        The warm-up is at least ``depth`` batches, so no timed batch was decoded while the
        pipeline was filling; the timed window spans several cycles, so the bursts at its
        ends weigh little. A DataLoader: ``prefetch_factor=2`` batches per worker, one batch
        per worker per cycle.
        """
        return (2 * job.workers, job.workers) if job.workers else (1, 1)


def version_of(distribution: str) -> str:
    """Installed version of a distribution, or ``"not installed"``."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        if distribution == "vidloader":  # run from a source tree (PYTHONPATH=src)
            from .. import __version__

            return f"{__version__} (source tree)"
        return "not installed"


def root_cause(exc: BaseException) -> str:
    """The innermost cause of an exception, as ``Type: message`` on one line."""
    while exc.__cause__ is not None or exc.__context__ is not None:
        exc = exc.__cause__ or exc.__context__
    return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"


def import_or_skip(module: str, distribution: str):
    """Import ``module`` or raise :class:`Skip` saying why."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        if version_of(distribution) == "not installed":
            raise Skip(f"{distribution} is not installed (pip install {distribution})") from None
        raise Skip(f"{distribution} {version_of(distribution)} is installed but does not import "
                   f"here: {root_cause(exc)}") from None
    except Exception as exc:  # a broken native library raises OSError, RuntimeError …
        raise Skip(f"{distribution} {version_of(distribution)} is installed but does not import "
                   f"here: {root_cause(exc)}") from None


# -- vidloader --------------------------------------------------------------------------------


class VidloaderPeer(Peer):
    """``vidloader.VideoLoader`` with the workload's own sampler and processing."""

    name, library, backend = "vidloader", "vidloader", "cpu"
    #: Further ``VideoLoader`` arguments of this variant.
    loader_options: dict = {}

    def __init__(self) -> None:
        self._loader = None

    def batches(self, job: Job) -> Iterator[torch.Tensor]:
        loader = self._make_loader(job)
        self._loader = loader
        try:
            yield from self._iterate(loader, job.plan)
        finally:
            loader.shutdown()

    def _make_loader(self, job: Job):
        from ..errors import BackendUnavailableError, ConfigError
        from ..pipeline import VideoLoader

        budget = job.memory_budget if self.backend != "cpu" else None
        options = dict(
            sampler=job.plan.sampler, batch_size=job.plan.samples_per_batch,
            processing=job.workload.geometry.process(), backend=self.backend,
            num_workers=job.workers, drop_last=True, persistent_workers=True,
            device=job.device, memory_budget=budget,
        )
        options.update(self.loader_options)  # a peer's (or a caller's) settings win
        try:
            return VideoLoader(job.index, **options)
        except (BackendUnavailableError, ConfigError) as exc:
            if self.backend == "cpu":
                raise
            raise Skip(f"VideoLoader(backend={self.backend!r}): {exc}") from None

    def _iterate(self, loader, plan: Plan) -> Iterator[torch.Tensor]:
        done, n = 0, len(plan.batches)
        while done < n:
            before = done
            for batch in self._guard(iter(loader), first=done == 0):
                _check_same_batch(batch, plan.batches[done])
                done += 1
                frames = batch["frames"]
                # One row per camera, as every peer delivers (a multi-camera sampler's batches
                # have a camera axis).
                yield frames.flatten(0, 1) if plan.sampler.rows_per_sample > 1 else frames
                if done >= n:
                    break
            if done == before:
                raise RuntimeError("VideoLoader delivered no batch in an epoch")

    def _guard(self, it, *, first: bool):
        """Turn a missing GPU backend found by the first batch into a skip."""
        if not first or self.backend == "cpu":
            yield from it
            return
        try:
            batch = next(it)
        except StopIteration:
            return
        except Exception as exc:
            text = f"{type(exc).__name__}: {exc}"
            if any(k in text for k in ("BackendUnavailable", "ConfigError", "PyNvVideoCodec")):
                raise Skip(f"VideoLoader(backend={self.backend!r}) cannot decode here: "
                           f"{text.splitlines()[0]}") from None
            raise
        yield batch
        yield from it

    def counters(self) -> dict | None:
        if self._loader is None:
            return None
        return dataclasses.asdict(self._loader.decode_stats)

    def memory_plan(self) -> dict | None:
        if self._loader is None:
            return None
        plan = self._loader.memory_plan
        if plan is not None:  # what the run's staging buffers did, beside what was planned
            plan = {**plan, "gpu_staging": dict(self._loader.stats.get("gpu_staging", {}))}
        return plan

    def pipeline(self, job: Job) -> tuple[int, int]:
        # VideoLoader decodes at most its staging slots ahead. Whole-batch units: a worker
        # delivers its `lookahead` batches at once, all workers per cycle. Block units
        # (GopShuffle): all workers share one block, a block per cycle. A CPU loader with the
        # same settings says what it would choose (the constructor starts nothing).
        loader = _settings_loader(job, self.loader_options)
        lookahead, workers = loader.lookahead, max(1, job.workers)
        return loader.staging_slots, lookahead * (1 if loader.uses_block_units else workers)


#: Loader settings that shape a peer's pipeline depth, taken over by :func:`_settings_loader`
#: from the peer's ``loader_options``.
_DEPTH_OPTIONS = ("lookahead", "prefetch")


def _settings_loader(job: Job, loader_options: dict | None = None):
    """A CPU ``VideoLoader`` with the job's settings, never iterated: what vidloader would
    choose (lookahead, staging slots, unit shapes) for a peer's :meth:`~Peer.pipeline` (its
    constructor starts no worker). ``loader_options``: the peer's, of which the lookahead and
    the prefetch are applied."""
    from ..pipeline import VideoLoader

    chosen = {k: v for k, v in (loader_options or {}).items() if k in _DEPTH_OPTIONS}
    return VideoLoader(job.index, sampler=job.plan.sampler, batch_size=job.plan.samples_per_batch,
                       processing=job.workload.geometry.process(), num_workers=job.workers,
                       drop_last=True, **chosen)


def _check_same_batch(batch: dict, bp) -> None:
    """The comparison is like for like only if vidloader delivered the planned frames."""
    want = bp.frame_indices if bp.is_clip else bp.frame_indices[:, 0]
    got_v = batch["video_index"].cpu().numpy()
    got_f = batch["frame_index"].cpu().numpy()
    # Row-major order: a multi-camera batch's [samples, cameras(, T)] is the plan's rows.
    if not (np.array_equal(got_v.ravel(), bp.video_indices)
            and np.array_equal(got_f.ravel(), want.ravel())):
        raise RuntimeError(f"vidloader delivered other frames than planned in batch "
                           f"{bp.batch_index} of epoch {bp.epoch}")


class VidloaderNvdecPeer(VidloaderPeer):
    """``VideoLoader(..., backend="nvdec")``: skipped while the backend is unavailable."""

    name, backend = "vidloader-nvdec", "nvdec"

    def check(self) -> None:
        if not torch.cuda.is_available():
            raise Skip("no CUDA GPU visible to torch")

    def pipeline(self, job: Job) -> tuple[int, int]:
        # Separation mode: workers only demux ahead; this process queues up to
        # SeparationPool.max_units_decoding (4) units on its decoder threads and waits for
        # the oldest, so up to 4 units are being decoded behind the one delivered: the
        # warm-up is 5 units and a cycle 4 (the harness times at least 3 cycles), or the
        # work done ahead during the warm-up would inflate a short timed window. (The CPU
        # model, workers x lookahead per cycle, made the first H200 runs time out.)
        # A plan of streams goes to NVDEC as the GOPs its rows walk through: units that begin
        # STREAM_GOP_STRIDE batches apart and reach a GOP's span further.
        from ..constants import DEFAULT_PREFETCH_PER_WORKER
        from ..pipeline._loader import takes_stream_gops
        from ..pipeline._units import STREAM_GOP_STRIDE, stream_gop_span

        loader = _settings_loader(job, self.loader_options)
        # A larger prefetch than the default holds that many more units ahead: warm them up too.
        extra = max(0, loader.config.prefetch - DEFAULT_PREFETCH_PER_WORKER)
        if takes_stream_gops(lambda: loader._epoch_plan(0), backend=self.backend,
                             num_workers=job.workers, lookahead=None):
            stride = STREAM_GOP_STRIDE
            return (5 + extra) * stride + stream_gop_span(job.index), 4 * stride
        return (5 + extra) * loader.lookahead, 4 * loader.lookahead


class VidloaderNvdecProcessesPeer(VidloaderNvdecPeer):
    """``VideoLoader(..., backend="nvdec", nvdec_processes=12, nvdec_decoders=2)``: NVDEC in
    twelve worker processes of two decoder threads, each demuxing and decoding its units
    (``pipeline/_nvdec_workers.py``); the fastest setting on SPDL's Kinetics setting in
    session18-6 (9,804 frames/s against 2,876 for NVDEC in one process)."""

    name = "vidloader-nvdec-p12"
    loader_options = {"nvdec_processes": 12, "nvdec_decoders": 2}


class VidloaderComboPeer(VidloaderNvdecPeer):
    """``VideoLoader(..., backend="combo")``: CPU workers and NVDEC at once (its CPU decode
    workers are ``--workers``, a quarter as many more demux for NVDEC); skipped without CUDA."""

    name, backend = "vidloader-combo", "combo"

    def pipeline(self, job: Job) -> tuple[int, int]:
        # The combo's staging slots hold a unit per CPU worker and NVDEC's queue
        # (``units_decoding``), about 84 batches at 16 workers, far more than NVDEC's 5 units:
        # a warm-up of all of them, so what was decoded ahead does not land in the timed
        # window. Counted on a CPU loader with the same settings (a combo loader would need
        # the GPU here, before ``check``), plus NVDEC's queue.
        loader = _settings_loader(job, self.loader_options)
        slots = loader.staging_slots + loader.config.units_decoding * loader.lookahead
        return slots + loader.lookahead, slots


# -- the exercise's naive loader --------------------------------------------------------------


class _NaiveDataset(torch.utils.data.Dataset):
    """The exercise's loader: every item opens its file, seeks with PyAV to the keyframe before
    its (first) frame, decodes forward to it, converts to RGB and resizes after decoding.

    Items are ``(path, stream_index, pts of the wanted frames)``; an item returns the frame(s)
    and the number of frames it decoded.
    """

    def __init__(self, items: list[tuple[str, int, tuple[int, ...]]], geometry: Geometry,
                 is_clip: bool) -> None:
        self.items, self.geometry, self.is_clip = items, geometry, is_clip

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        import av

        path, stream_index, pts = self.items[i]
        with av.open(path) as container:
            stream = container.streams[stream_index]
            container.seek(pts[0], stream=stream)  # backward, to the keyframe at or before
            pictures, decoded = _decode_until(container, stream, pts)
        x = resize_torch(torch.from_numpy(np.stack(pictures)), self.geometry)
        return (x if self.is_clip else x[0]), decoded


class FramesAt:
    """The frames at ``pts`` (ascending), decoded from where ``container`` stands (after a
    seek to the keyframe before the first); :attr:`decoded` counts every frame decoded on the
    way, wanted or not.

    Raises (while iterated):
        RuntimeError: a wanted pts has no frame, or the stream ends before it.
    """

    def __init__(self, container, stream, pts) -> None:
        self.container, self.stream, self.pts = container, stream, list(pts)
        self.decoded = 0

    def __iter__(self):
        k = 0
        for frame in self.container.decode(self.stream):
            self.decoded += 1
            if frame.pts is None or frame.pts < self.pts[k]:
                continue
            if frame.pts != self.pts[k]:
                raise RuntimeError(f"{self.container.name}: no frame at pts {self.pts[k]}")
            yield frame
            k += 1
            if k == len(self.pts):
                return
        raise RuntimeError(f"{self.container.name}: ended before pts {self.pts[k]}")


def _decode_until(container, stream, pts: tuple[int, ...]) -> tuple[list[np.ndarray], int]:
    frames = FramesAt(container, stream, pts)
    return [frame.to_ndarray(format="rgb24") for frame in frames], frames.decoded


class NaivePeer(Peer):
    """The exercise's ``Dataset`` (PyAV seek per item) under a ``DataLoader``."""

    name, library = "naive", "av"
    note = "naive: PyAV, open + seek + decode per item, resize after decode (the exercise)"

    def __init__(self) -> None:
        self._counts = {"decoded": 0, "delivered": 0}

    def batches(self, job: Job) -> Iterator[torch.Tensor]:
        items = []
        for bp in job.plan.batches:
            for v, frames in zip(bp.video_indices, bp.frame_indices):
                rec = job.index[int(v)]
                items.append((rec.path, rec.stream_index, tuple(int(p) for p in rec.pts[frames])))
        clip = job.plan.batches[0].is_clip
        dataset = _NaiveDataset(items, job.workload.geometry, clip)
        loader = data_loader(dataset, workers=job.workers, batch_size=job.plan.batch_size,
                             pin_memory=job.device == "cuda")
        for frames, decoded in loader:
            self._counts["decoded"] += int(decoded.sum())
            self._counts["delivered"] += int(np.prod(frames.shape[:-3]))
            yield frames

    def counters(self) -> dict:
        return dict(self._counts)
