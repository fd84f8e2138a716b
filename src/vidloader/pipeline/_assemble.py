"""Fill a batch's staging buffers from decoded frames: the glue between planner, executor and
processing. Runs in a CPU worker (numpy views of shared memory) or beside an NVDEC executor
(torch CUDA tensors); it only slices and assigns, so both work.
"""

from __future__ import annotations

import dataclasses
import logging
from collections import defaultdict

import numpy as np

from .._utils._nvtx import NO_RANGES, Ranges
from ..decoding import Executor
from ..errors import CorruptVideoError, MediaError, StaleIndexError
from ..index import VideoIndex
from ..planning import plan_tasks
from ..processing import Geometry, Process, apply_window, geometry, sample_transform, upright
from ..sampling import BatchPlan

log = logging.getLogger(__name__)


def mark_failed(plans, results, video: int, path: str, message: str,
                delivered: set[int] | None = None) -> None:
    """Mark the samples of ``video`` in ``plans`` invalid and record the file's error.

    ``delivered``: frames of the video that reached their slots before the failure (decoded
    before the damage, so correct): a sample all of whose frames are among them stays valid.
    """
    for plan, res in zip(plans, results):
        hit = plan.video_indices == video
        if delivered:
            frames = plan.frame_indices
            whole = np.isin(frames, np.fromiter(delivered, np.int64, len(delivered))).all(axis=1)
            hit &= ~whole
        if hit.any():
            res.valid[hit] = False
            res.errors.append((path, message))


def _after_failure(task, delivered: set[int]) -> int:
    """Position in ``task.gops`` of the GOP after the first one with a wanted frame not
    ``delivered`` (``len(task.gops)`` if there is none)."""
    for g, gop in enumerate(task.gops):
        if not delivered.issuperset(gop.frames.tolist()):
            return g + 1
    return len(task.gops)


def recording(sink, delivered: set[int]):
    """``sink`` that also adds each frame index it is given to ``delivered``."""
    def record(frame_index: int, frame) -> None:
        sink(frame_index, frame)
        delivered.add(frame_index)  # after the write: a failed write is not delivered

    return record


@dataclasses.dataclass
class FillResult:
    """Which samples of the batch were filled, and the files that failed."""

    valid: np.ndarray
    errors: list[tuple[str, str]]


def slots_by_frame(plans: list[BatchPlan]) -> dict[tuple[int, int], list[tuple[int, int, int]]]:
    """``(video, frame) -> [(plan, sample, t), ...]``: every place a decoded frame must go."""
    slots: dict[tuple[int, int], list[tuple[int, int, int]]] = defaultdict(list)
    for p, plan in enumerate(plans):
        videos = plan.video_indices.tolist()
        for b, frames in enumerate(plan.frame_indices.tolist()):
            for t, f in enumerate(frames):
                slots[(videos[b], f)].append((p, b, t))
    return slots


def copy_runs(dst, rows: list[int], cols: list[int], src, ks: list[int]) -> None:
    """``dst[rows[j], cols[j]] = src[ks[j]]`` for every ``j``, as slice copies of runs.

    A run is a stretch where ``k`` steps by one and either the row steps by one in one column
    (stream order: a GOP's frames fill consecutive rows) or the column steps by one in one row
    (a clip's frames). No list indices: on a CUDA tensor they are host-to-device copies from
    pageable memory, which wait for the stream each time (three per write), and GopShuffle
    deals a GOP's frames over as many batches, so most runs hold one frame.
    """
    j, n = 0, len(ks)
    while j < n:
        e, step = j + 1, None
        if e < n and ks[e] == ks[j] + 1 and (rows[e] - rows[j], cols[e] - cols[j]) in ((1, 0), (0, 1)):
            step = (rows[e] - rows[j], cols[e] - cols[j])
            while e < n and ks[e] == ks[e - 1] + 1 and (rows[e] - rows[e - 1], cols[e] - cols[e - 1]) == step:
                e += 1
        if step == (1, 0):
            dst[rows[j]:rows[e - 1] + 1, cols[j]] = src[ks[j]:ks[e - 1] + 1]
        elif step == (0, 1):
            dst[rows[j], cols[j]:cols[e - 1] + 1] = src[ks[j]:ks[e - 1] + 1]
        else:
            dst[rows[j], cols[j]] = src[ks[j]]
        j = e


class Windowed:
    """``src`` seen through one sample's window: ``Windowed(...)[key]`` is
    ``apply_window(src[key], geom, tf)``, so :func:`copy_runs` writes a clip's cropped frames
    in a GOP stack as one crop (and flip) and one copy per run. On the NVDEC path each write
    is a launch from a decoder thread holding the GIL, and a 16-frame clip made 16
    (session17-3: a tenth of the decoder threads' time)."""

    def __init__(self, src, geom: Geometry, tf) -> None:
        self.src, self.geom, self.tf = src, geom, tf

    def __getitem__(self, key):
        return apply_window(self.src[key], self.geom, self.tf)


def _write(dst, row: int, col: int, frame) -> None:
    """``dst[row, col] = frame``, also for a CPU decoder's numpy frame into a GPU staging
    tensor (the NVDEC side's CPU fallback), which torch refuses to assign directly."""
    if isinstance(frame, np.ndarray) and not isinstance(dst, np.ndarray):
        import torch  # here only: CPU workers write numpy into numpy and never load torch

        frame = torch.from_numpy(np.ascontiguousarray(frame))
    dst[row, col] = frame


class UnitFill:
    """A unit of batches being filled (:meth:`BatchAssembler.start_unit`)."""

    def __init__(self, assembler: BatchAssembler, plans, results, tasks, sinks, bundles,
                 stagings: list | None = None) -> None:
        self.assembler, self.plans, self.results = assembler, plans, results
        self.tasks, self.sinks, self.bundles = tasks, sinks, bundles
        self.pending = None  # an executor's PendingBatch
        self.redo = False  # decode task by task (no batch API, or the batch hit a bad file)
        # The list the unit's sinks write through (their closures hold it). Emptied when the
        # unit fails or is cancelled: a failed GOP's traceback keeps the sink's frame, and a
        # cleared frame still holds its function, so the closure would keep the staging slots
        # (pool memory, 19 MiB each at 224²) alive for as long as anyone holds the error.
        self.stagings = stagings if stagings is not None else []

    def finish(self) -> list[FillResult]:
        """Wait for the unit's decoding; return each batch's :class:`FillResult`."""
        try:
            self._wait()
            if self.redo:
                self.redo = False
                self.assembler.redo_task_by_task(self)
        except BaseException:
            self.release()
            raise
        return self.results

    def _wait(self) -> None:
        if self.pending is not None:
            pending, self.pending = self.pending, None
            try:
                with self.assembler.ranges("vidloader.wait"):
                    pending.wait()
            except MediaError:
                if not self.assembler.redoes_failures:
                    raise
                self.redo = True  # one bad file: redo task by task, to tell good from bad

    def release(self) -> None:
        """Let the sinks' closures go of the unit's staging buffers (no sink runs after)."""
        self.stagings.clear()

    @property
    def ready(self) -> bool:
        """Whether :meth:`finish` would return without waiting for the decoders (a unit
        without an asynchronous executor, or whose pending batch has finished)."""
        done = getattr(self.pending, "done", None)
        return self.pending is None or done is None or done()

    def cancel(self) -> None:
        """Stop the unit's decoding (nothing is written into its slots afterwards)."""
        if self.pending is not None:
            self.pending.cancel()
            self.pending = None
        self.release()


class BatchAssembler:
    """Decodes a :class:`BatchPlan` with an executor into per-output staging buffers.

    Args:
        index: the dataset index.
        outputs: ``{name: Process}``.
        executor: the decoding backend.
        skips_bad_files: False propagates a bad file's error; True marks its samples
            invalid, logs and counts them (the loader's ``on_error="skip"``).
        fallback: an executor for what ``executor`` cannot decode (a CPU executor beside
            NVDEC): the videos ``routed`` to it, and any file whose decode fails on
            ``executor`` at run time (retried once on ``fallback`` before it counts as bad).
        routed: bool per video, True for videos that go to ``fallback`` directly.
        ranges: NVTX ranges: ``vidloader.convert`` around each sink call (conversion, resize,
            crop, flip and the write into the slot), ``vidloader.wait`` around waiting for
            an asynchronous unit. Default: off.
    """

    def __init__(self, index: VideoIndex, outputs: dict[str, Process], executor: Executor, *,
                 skips_bad_files: bool = False, fallback: Executor | None = None,
                 routed: np.ndarray | None = None, ranges: Ranges = NO_RANGES) -> None:
        self.index, self.outputs, self.executor = index, outputs, executor
        self.ranges = ranges
        self.skips_bad_files = bool(skips_bad_files)
        self.fallback, self.routed = fallback, routed
        #: Files decoded by the fallback since the last :meth:`take_fallbacks`: path -> why.
        self.fallbacks: dict[str, str] = {}
        self._fallen_back: set[str] = set()  # logged once per file
        self._skipped: set[str] = set()  # warned once per file
        self._geometry: dict[tuple[str, int], Geometry] = {}

    @classmethod
    def for_config(cls, config, executor: Executor, *, fallback: Executor | None = None) -> BatchAssembler:
        """The assembler of a loader's :class:`~._config.LoaderConfig`."""
        return cls(config.index, config.outputs, executor, skips_bad_files=config.skips_bad_files,
                   fallback=fallback, routed=None if fallback is None else config.cpu_only,
                   ranges=config.ranges)

    def close(self) -> None:
        """Close the executor and the fallback."""
        self.executor.close()
        if self.fallback is not None:
            self.fallback.close()

    def take_fallbacks(self) -> dict[str, str]:
        """The files decoded by the fallback since the last call (path -> why), once each."""
        taken, self.fallbacks = self.fallbacks, {}
        return taken

    def geometry(self, name: str, video: int) -> Geometry:
        key = (name, video)
        if key not in self._geometry:
            rec = self.index[video]
            self._geometry[key] = geometry(
                self.outputs[name], rec.height, rec.width, rotation=rec.rotation, path=rec.path
            )
        return self._geometry[key]

    def fill(self, plan: BatchPlan, staging: dict) -> FillResult:
        """Decode ``plan`` and write each output's frames into ``staging[name][b, slot]``."""
        return self.fill_unit([plan], [staging])[0]

    def fill_unit(
        self,
        plans: list[BatchPlan],
        stagings: list[dict],
        bundles: list | None = None,
        failed: list[tuple[int, str, str]] = (),
    ) -> list[FillResult]:
        """Fill several batches planned together (lookahead): a GOP or frame that several
        of them need is decoded once and delivered to all.

        Args:
            plans, stagings: the batches and their staging buffers.
            bundles: separation mode: the packets of each task (in ``plan_tasks`` order),
                demuxed by a CPU worker; ``None`` for a task whose demux failed.
            failed: a :class:`~._messages.DemuxFailed` for each task whose demux failed
                (see :meth:`_demux_failures`).
        """
        return self.start_unit(plans, stagings, bundles, failed).finish()

    def start_unit(
        self,
        plans: list[BatchPlan],
        stagings: list[dict],
        bundles: list | None = None,
        failed: list[tuple[int, str, str]] = (),
        *,
        tasks: list | None = None,
    ) -> UnitFill:
        """:meth:`fill_unit` in two halves: with an executor that decodes asynchronously
        (``batch_api == "gops"``: ``submit_batch``, NVDEC) this returns once the work is queued, so the next unit can
        be queued before this one is waited for (:meth:`UnitFill.finish`). ``tasks``: the
        unit's ``plan_tasks(plans, index)`` when the caller has them already."""
        for plan, staging in zip(plans, stagings):
            self._clear_unmapped_slots(plan, staging)
        stagings = list(stagings)  # the unit's own list (see UnitFill.release)
        slots = slots_by_frame(plans)
        transforms = [self._sample_transforms(plan) for plan in plans]
        results = [FillResult(np.ones(p.batch_size, bool), []) for p in plans]
        tasks = plan_tasks(plans, self.index) if tasks is None else tasks
        tasks, bundles = self._demux_failures(tasks, bundles, failed, plans, results, slots,
                                              transforms, stagings)
        tasks, bundles = self._decode_routed(tasks, bundles, plans, results, slots, transforms, stagings)
        if bundles is not None:  # demux failures were reported in `failed`
            kept = [i for i, b in enumerate(bundles) if b is not None]
            tasks, bundles = [tasks[i] for i in kept], [bundles[i] for i in kept]
        sinks = [self._sink(t.video_index, slots, transforms, stagings) for t in tasks]
        unit = UnitFill(self, plans, results, tasks, sinks, bundles, stagings)
        if not tasks:
            return unit
        try:
            api = self.executor.batch_api
            if api == "gops":
                gop_sink = self._gop_sink(tasks, slots, transforms, stagings)
                unit.pending = self.executor.submit_batch(tasks, gop_sink, bundles=bundles)
            elif api == "frames":
                self.executor.decode_batch(tasks, lambda k, i, f: sinks[k](i, f), bundles=bundles)
            else:
                unit.redo = True
        except MediaError:
            if not self.redoes_failures:
                unit.release()
                raise
            unit.redo = True  # one bad file: redo task by task, to tell the good from the bad
        except BaseException:
            unit.release()
            raise
        return unit

    @property
    def redoes_failures(self) -> bool:
        """Whether a failed unit is redone task by task (to skip or fall back per file)."""
        return self.skips_bad_files or self.fallback is not None

    def _demux_failures(self, tasks, bundles, failed, plans, results, slots, transforms, stagings):
        """Separation mode's failed demuxes (:class:`~._messages.DemuxFailed`): a task the
        worker sent to the CPU is decoded on the fallback here, now (as one process retries a file NVDEC failed);
        a task of which only some GOPs demuxed keeps those (its bundle holds their packets)
        and loses the samples of the others; any other loses all its samples. Returns the
        tasks and bundles left for the executor (a failed task's bundle stays ``None``)."""
        if not failed:
            return tasks, bundles
        by_video = {f.video: f for f in failed}
        tasks = list(tasks)
        for k, task in enumerate(tasks):
            f = by_video.pop(task.video_index, None)
            if f is None:
                continue
            if f.on_cpu and self.fallback is not None:
                sink = self._sink(task.video_index, slots, transforms, stagings)
                self._decode_on_fallback(task, sink, plans, results,
                                         why=f"demux for {self.executor.name} failed: {f.message}")
                continue
            gops = [task.gops[g] for g in f.kept]
            if len(gops) < len(task.gops):
                frames = {int(i) for gop in gops for i in gop.frames.tolist()}
                self._mark_failed(plans, results, f.video, f.path, f.message, frames)
            if gops and bundles is not None and bundles[k] is not None:
                tasks[k] = dataclasses.replace(task, gops=gops)
        for f in by_video.values():  # not a task of this unit (cannot happen): lose its samples
            self._mark_failed(plans, results, f.video, f.path, f.message)
        return tasks, bundles

    def _decode_routed(self, tasks, bundles, plans, results, slots, transforms, stagings):
        """Decode the tasks of videos routed to the fallback (here, now); return the rest."""
        if self.routed is None or not any(self.routed[t.video_index] for t in tasks):
            return tasks, bundles
        keep = []
        for k, task in enumerate(tasks):
            if not self.routed[task.video_index]:
                keep.append(k)
                continue
            sink = self._sink(task.video_index, slots, transforms, stagings)
            self._decode_on_fallback(task, sink, plans, results, why="routed")
        return [tasks[k] for k in keep], None if bundles is None else [bundles[k] for k in keep]

    def _decode_on_fallback(self, task, sink, plans, results, *, why: str) -> None:
        path = task.record.path
        if path not in self._fallen_back:
            self._fallen_back.add(path)
            self.fallbacks[path] = why
            log.info("decoding %s on the %s executor: %s", path, self.fallback.name, why)
        delivered: set[int] = set()
        sink = recording(sink, delivered)
        try:
            if self.skips_bad_files:  # the GOPs after a damaged one are still delivered
                self._decode_past_damage(self.fallback, task, sink, delivered)
            else:
                self.fallback.decode(task, sink)
        except MediaError as exc:
            if not self.skips_bad_files:
                raise
            self._mark_failed(plans, results, task.video_index, exc.path, str(exc), delivered)

    def _mark_failed(self, plans, results, video: int, path: str, message: str,
                     delivered: set[int] | None = None) -> None:
        """Mark the samples of ``video`` not fully ``delivered`` invalid; warn once per file
        (``message``, a :class:`MediaError`'s text, names it already)."""
        if path not in self._skipped:
            self._skipped.add(path)
            log.warning("skipping a file: %s", message)
        mark_failed(plans, results, video, path, message, delivered)

    def redo_task_by_task(self, unit: UnitFill) -> None:
        """Decode a unit's tasks one by one, marking the samples of the files that fail (or,
        with a fallback executor, retrying each failed file once on it: the whole task, so
        NVDEC is tried once per file and the fallback goes past the damage itself)."""
        for k, task in enumerate(unit.tasks):
            delivered: set[int] = set()
            sink = recording(unit.sinks[k], delivered)
            bundle = None if unit.bundles is None else unit.bundles[k]
            try:
                if self.skips_bad_files and self.fallback is None:
                    self._decode_past_damage(self.executor, task, sink, delivered, bundle)
                else:
                    self._decode_one(task, sink, bundle)
            except MediaError as exc:
                if self.fallback is not None:
                    why = f"failed on {self.executor.name}: {exc}"
                    self._decode_on_fallback(task, unit.sinks[k], unit.plans, unit.results, why=why)
                    continue
                if not self.skips_bad_files:
                    raise
                self._mark_failed(unit.plans, unit.results, task.video_index, exc.path, str(exc),
                                  delivered)

    @staticmethod
    def _decode_past_damage(executor: Executor, task, sink, delivered: set[int],
                            bundle=None) -> None:
        """Decode ``task`` on ``executor`` (from ``bundle``, separation mode's packets, when
        given); after a damaged GOP, go on with the GOPs after it (closed GOPs decode alone),
        then raise the first error so the lost samples are counted. A file that is gone,
        stale or undecodable as a whole fails once, as before.

        A bundle holds the task's GOPs in order, so the rest of the task decodes from the
        bundle's tail (:meth:`PacketBundle.gops_from`): the packets are here already, and
        demuxing them again from the file would read it a second time in this process, which
        separation mode keeps demux off."""
        first: MediaError | None = None
        while task.gops:
            try:
                if bundle is None:
                    executor.decode(task, sink)
                else:
                    executor.decode_bundle(task, bundle, sink)
                break
            except CorruptVideoError as exc:
                first = first or exc
                if isinstance(exc, StaleIndexError):
                    break
                after = _after_failure(task, delivered)
                task = dataclasses.replace(task, gops=task.gops[after:])
                if bundle is not None:
                    bundle = bundle.gops_from(after)
        if first is not None:
            raise first

    def _decode_one(self, task, sink, bundle) -> None:
        if bundle is None:
            self.executor.decode(task, sink)
        else:
            self.executor.decode_bundle(task, bundle, sink)

    def _sample_transforms(self, plan: BatchPlan) -> dict:
        videos, seeds = plan.video_indices.tolist(), plan.sample_seeds.tolist()
        return {
            name: [
                sample_transform(proc, self.geometry(name, v), s) for v, s in zip(videos, seeds)
            ]
            for name, proc in self.outputs.items()
        }

    def _sink(self, video: int, slots, transforms, stagings):
        outputs = self.outputs

        def sink(frame_index: int, frame) -> None:
            rgb_by_size: dict[tuple, object] = {}  # (coded size, turns) -> upright RGB
            for p, b, t in slots[(video, frame_index)]:
                for name, proc in outputs.items():
                    slot = proc.slots(t)
                    if slot < 0:
                        continue
                    geom = self.geometry(name, video)
                    rgb = rgb_by_size.get((geom.coded_hw, geom.turns))
                    if rgb is None:
                        rgb = rgb_by_size[(geom.coded_hw, geom.turns)] = upright(frame.to_rgb(geom.coded_hw), geom)
                    _write(stagings[p][name], b, slot, apply_window(rgb, geom, transforms[p][name][b]))

        return self.ranges.wrap("vidloader.convert", sink)

    def _gop_sink(self, tasks, slots, transforms, stagings):
        """The per-GOP sink of ``submit_batch``: convert a stack of the GOP's frames (all of
        them, or ``stack_frames`` at a time) in one batched call per output size, then crop
        each sample's window into its staging slot. Runs on decoder threads: it only reads
        shared state, and every (batch, sample, slot) is written once."""
        outputs = self.outputs
        videos = [t.video_index for t in tasks]
        geoms = {(name, v): self.geometry(name, v) for v in set(videos) for name in outputs}

        def sink(pos: int, indices: list[int], frames) -> None:
            video = videos[pos]
            rgb_by_size: dict[tuple, object] = {}  # (coded size, turns) -> upright RGB
            for name, proc in outputs.items():
                geom = geoms[(name, video)]
                rgb = rgb_by_size.get((geom.coded_hw, geom.turns))
                if rgb is None:
                    rgb = rgb_by_size[(geom.coded_hw, geom.turns)] = upright(frames.to_rgb(geom.coded_hw), geom)
                whole: dict[int, tuple[list, list, list]] = {}  # staging -> (rows, slots, frames)
                windowed: dict[tuple, tuple[list, list]] = {}  # (staging, row) -> (slots, frames)
                for k, i in enumerate(indices):
                    for p, b, t in slots.get((video, i), ()):
                        slot = proc.slots(t)
                        if slot < 0:
                            continue
                        tf = transforms[p][name][b]
                        if geom.decode_hw == geom.out_hw and not tf.flip:
                            rows, cols, ks = whole.setdefault(p, ([], [], []))
                            rows.append(b)
                            cols.append(slot)
                            ks.append(k)
                        else:
                            cols, ks = windowed.setdefault((p, b), ([], []))
                            cols.append(slot)
                            ks.append(k)
                for p, (rows, cols, ks) in whole.items():
                    copy_runs(stagings[p][name], rows, cols, rgb, ks)
                for (p, b), (cols, ks) in windowed.items():  # a sample's frames share a window
                    copy_runs(stagings[p][name], [b] * len(cols), cols,
                              Windowed(rgb, geom, transforms[p][name][b]), ks)

        return self.ranges.wrap("vidloader.convert", sink)

    def _clear_unmapped_slots(self, plan: BatchPlan, staging: dict) -> None:
        # index_map may leave output slots that no clip frame fills: keep them zero, since
        # staging buffers are reused across batches.
        for name, proc in self.outputs.items():
            if proc.index_map is None:
                continue
            used = {s for s in proc.index_map if s >= 0}
            for slot in range(proc.frames_out(plan.sequence_length)):
                if slot not in used:
                    staging[name][: plan.batch_size, slot] = 0
