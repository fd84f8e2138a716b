"""Separation mode's demux workers: GOPs to Annex-B packet bundles, on the CPU, without torch.

A demux worker needs PyAV, numpy and shared memory, nothing else: it is a fork of the demux
fork server (``_utils._procs``, which preloads numpy, PyAV and this module, never torch), and
every module it imports, this one's included, is torch-free
(``tests/test_procs.py`` checks both). torch's ~190 MiB of RSS per process (more with CUDA's
libraries) made 16 demux workers cost several GiB.
"""

from __future__ import annotations

import signal
import traceback

from .._utils._heap import trim_heap
from .._utils._nvtx import NO_RANGES, Ranges
from ..decoding.nvdec import ContainerCache, concat_bundles, demux_gops
from ..errors import MediaError, StaleIndexError, VideoNotFoundError
from ..planning import plan_tasks
from ._messages import STOP, DemuxFailed, DemuxWorkerStart, Failure, PacketsDemuxed, Ready
from ._payloads import SharedPayloads


def demux_worker_main(start: DemuxWorkerStart, task_q, result_q) -> None:
    """Separation mode: demux the GOPs a unit of batches needs into Annex-B packet bundles.

    CPU only by construction: it imports neither torch nor PyNvVideoCodec, so it can neither
    see nor create a CUDA context (the exercise's CUDA_ERROR_NOT_INITIALIZED cannot happen
    here). Takes :class:`DemuxTask` s; replies :class:`PacketsDemuxed` (payloads in one
    shared-memory segment, see :class:`~._payloads.SharedPayloads`) or a :class:`Failure` naming the
    unit's key.
    """
    # Ctrl-C goes to the whole process group: the loader handles it and stops the workers.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    ranges = Ranges(start.nvtx)
    containers = ContainerCache()
    result_q.put(Ready(start.worker_id))
    try:
        while (task := task_q.get()) is not STOP:
            try:
                # Every part re-plans the unit (cheap) and demuxes its own slice of the tasks,
                # each packet copied once, from FFmpeg's buffer to the part's segment.
                tasks = plan_tasks(task.plans, start.index)[task.start:task.stop]
                segment, light, failed = demux_part(tasks, containers, start, ranges)
            except BaseException as exc:
                result = Failure(-1, None, repr(exc), traceback.format_exc(),
                                 getattr(exc, "path", None), unit_key=task.key)
            else:
                result = PacketsDemuxed(task.key, light, failed, task.part, segment)
            result_q.put(result)
            # After the put, so the GPU process is not kept waiting (22 ms for 150 MiB freed,
            # 78 ms for 600 MiB): else the worker keeps its largest unit's memory (_utils._heap).
            trim_heap()
    finally:
        containers.close()


def demux_part(tasks, containers, start: DemuxWorkerStart, ranges=NO_RANGES):
    """``(segment, light bundles, failed)`` of a demux part: :func:`demux_tasks` writing into
    one :class:`SharedPayloads` segment, ended by its ``pack``."""
    payloads = SharedPayloads(prefix=start.segment_prefix)
    try:
        bundles, failed = demux_tasks(tasks, containers, start.skips_bad_files, start.cpu_only,
                                      ranges, falls_back=start.falls_back, sink=payloads)
    except BaseException:
        payloads.discard()
        raise
    segment, light = payloads.pack(bundles)  # empties ``bundles``: no view of it is left
    return segment, light, failed


#: Errors of a file as a whole (gone, or changed since indexing): none of its GOPs is kept.
WHOLE_FILE_ERRORS = (StaleIndexError, VideoNotFoundError)


def demux_tasks(tasks, containers, skips_bad_files: bool, cpu_only=None, ranges=NO_RANGES, *,
                falls_back: bool = False, sink=None):
    """Bundles of the tasks, ``None`` for a task routed to the CPU (NVDEC cannot decode its
    file: the loader's process decodes it there) or whose demux failed (listed in ``failed``
    as a :class:`DemuxFailed`).

    A failed demux (a NAL length prefix the Annex B filter refuses, say) of a file that is
    neither gone nor stale goes, with ``falls_back``, to the loader's CPU fallback whatever
    ``skips_bad_files`` says, as in one process (the CPU decoder may read what the filter
    refused). Without it and with ``skips_bad_files``, the task's GOPs are demuxed one by
    one and those that demux are kept (its bundle), so only the samples of the others are
    skipped. A gone or stale file fails whole: raised, or skipped with ``skips_bad_files``.

    ``sink``: where the packets go (:func:`~vidloader.decoding.nvdec.demux_gops`'s); the
    bundles' payloads are then views of it.
    """
    bundles, failed = [], []
    for task in tasks:
        if cpu_only is not None and cpu_only[task.video_index]:
            bundles.append(None)
            continue
        try:
            with ranges("vidloader.demux", task.record.path):
                bundles.append(demux_gops(task.record, task.gops, container_cache=containers,
                                          sink=sink))
        except MediaError as exc:
            whole = isinstance(exc, WHOLE_FILE_ERRORS)
            if falls_back and not whole:
                bundles.append(None)
                failed.append(DemuxFailed(task.video_index, exc.path, str(exc), on_cpu=True))
                continue
            if not skips_bad_files:
                raise
            kept, bundle = ((), None) if whole else _demuxable_gops(task, containers, sink)
            bundles.append(bundle)
            failed.append(DemuxFailed(task.video_index, exc.path, str(exc), kept=kept))
    return bundles, failed


def _demuxable_gops(task, containers, sink=None) -> tuple[tuple[int, ...], object]:
    """Positions of ``task``'s GOPs that demux alone (after the task's demux failed), and
    their packets as one bundle (``None`` when none demuxes). With a sink, the GOPs kept lie
    back to back in it (a GOP that fails is cut back out), and the bundle's payload is the
    sink's view of them; a whole-file error cuts all of them back out."""
    kept, parts = [], []
    start = sink.tell() if sink is not None else 0
    for g, gop in enumerate(task.gops):
        try:
            parts.append(demux_gops(task.record, [gop], container_cache=containers, sink=sink))
        except MediaError as exc:
            if isinstance(exc, WHOLE_FILE_ERRORS):
                if sink is not None:
                    sink.truncate(start)
                return (), None
            continue
        kept.append(g)
    if not parts:
        return (), None
    joined = None if sink is None else sink.view(start, sink.tell())
    return tuple(kept), concat_bundles(parts, payload=joined)
