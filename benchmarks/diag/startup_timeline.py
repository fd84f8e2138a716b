"""A timeline of a loader's first batch: when each unit was handed out, demuxed, started and
filled, and when each GOP was decoded on which decoder thread (``benchmarks/startup.py
--timeline``). Issue 14: with 16 workers on the H200 the first batch comes about 2 s after
the workers are ready, where the steady state makes a batch every 0.26 s, and the decoder
threads wait for work 40% of that time; this says on what.

It wraps methods of the loader's pools and of the NVDEC executor in this process (nothing in
the library changes, nothing runs in the workers), so it costs a clock read and a list append
per event. Events are ``(seconds since the loader was created, kind, detail...)``:

- ``submit`` (unit, first batch, rows): a unit handed to the pool (separation mode: to the
  demux workers; CPU workers: to a worker);
- ``demuxed`` (unit, part): a demux worker's packets for a part of a unit arrived;
- ``start`` (unit): the unit's decoding started (NVDEC);
- ``gop`` (thread ident, file, keyframe, seconds): one GOP decoded and delivered on a decoder
  thread;
- ``wait`` (seconds): the loader's thread waited on a unit's decoding;
- ``filled`` (batch, row, rows): a unit's rows reported to the scheduler.
"""

from __future__ import annotations

import collections
import functools
import os
import threading
import time


class Timeline:
    """Collects events from the moment :meth:`start` is called until :meth:`stop`."""

    def __init__(self) -> None:
        self.events: list[tuple] = []
        self._t0: float | None = None
        self._undo: list = []
        self._lock = threading.Lock()

    def start(self) -> None:
        self._t0 = time.monotonic()
        self.events = []

    def stop(self) -> list[tuple]:
        self._t0 = None
        return self.events

    def add(self, kind: str, *detail, at: float | None = None) -> None:
        if self._t0 is None:
            return
        now = time.monotonic() if at is None else at
        with self._lock:
            self.events.append((round(now - self._t0, 4), kind, *detail))

    # -- what is wrapped

    def install(self) -> None:
        """Wrap the pools' and the NVDEC executor's methods (once; :meth:`uninstall` undoes)."""
        from vidloader.pipeline import _pool

        self._wrap(_pool.SeparationPool, "submit", self._after_submit)
        self._wrap(_pool.ProcessPool, "submit", self._after_submit)
        self._wrap(_pool.SeparationPool, "_receive", self._after_receive)
        self._wrap(_pool.SeparationPool, "_start", self._after_start)
        self._wrap(_pool.SeparationPool, "get", self._after_get)
        self._wrap(_pool.ProcessPool, "get", self._after_get)
        try:
            from vidloader.decoding.nvdec import _executor
        except Exception:  # no PyNvVideoCodec here: CPU events only
            return
        self._time(_executor.NvdecExecutor, "_deliver_gop", self._gop)
        self._time(_executor.PendingBatch, "wait", lambda args, s: ("wait", s))

    def uninstall(self) -> None:
        for cls, name, original in reversed(self._undo):
            setattr(cls, name, original)
        self._undo.clear()

    def _wrap(self, cls, name: str, after) -> None:
        original = cls.__dict__[name]

        @functools.wraps(original)
        def wrapper(obj, *args, **kwargs):
            out = original(obj, *args, **kwargs)
            after(obj, args, out)
            return out

        setattr(cls, name, wrapper)
        self._undo.append((cls, name, original))

    def _time(self, cls, name: str, event) -> None:
        original = cls.__dict__[name]

        @functools.wraps(original)
        def wrapper(obj, *args, **kwargs):
            t = time.monotonic()
            try:
                return original(obj, *args, **kwargs)
            finally:
                self.add(*event(args, round(time.monotonic() - t, 4)), at=t)

        setattr(cls, name, wrapper)
        self._undo.append((cls, name, original))

    def _after_submit(self, pool, args, out) -> None:
        task = args[1]
        key = pool._order[-1] if hasattr(pool, "_order") and pool._order else args[0]
        self.add("submit", key, task.first_batch, sum(p.batch_size for p in task.plans))

    def _after_receive(self, pool, args, out) -> None:
        msg = args[0]
        self.add("demuxed", msg.key, msg.part)

    def _after_start(self, pool, args, out) -> None:
        self.add("start", args[0])

    def _after_get(self, pool, args, out) -> None:
        if hasattr(out, "valid"):
            self.add("filled", out.batch_index, out.row_start, len(out.valid))

    @staticmethod
    def _gop(args, seconds):
        job = args[2]
        # by ident: the decoder threads of one GPU share a name
        return ("gop", threading.get_ident(), os.path.basename(job.record.path),
                int(job.gop.keyframe), seconds)


def summarize(events: list[tuple], first_batch_s: float) -> dict:
    """What the events say about the first batch: when its units were demuxed and started,
    how busy each decoder thread was before it came, and how many GOPs that took."""
    def first(kind):
        return next((e[0] for e in events if e[1] == kind), None)

    before = [e for e in events if e[0] <= first_batch_s]
    gops = [e for e in before if e[1] == "gop"]
    busy: dict[str, float] = collections.defaultdict(float)
    for e in gops:
        busy[e[2]] += e[5]
    # GOP events are appended as they end, stamped with their start
    span = (min((e[0] for e in gops), default=None), max((e[0] + e[5] for e in gops), default=None))
    waits = [e for e in before if e[1] == "wait"]
    return {
        "first_batch_s": first_batch_s,
        "first_submit_s": first("submit"), "first_demuxed_s": first("demuxed"),
        "first_start_s": first("start"), "first_gop_s": span[0], "last_gop_end_s": span[1],
        "units_submitted": sum(e[1] == "submit" for e in before),
        "units_started": sum(e[1] == "start" for e in before),
        "demux_parts_arrived": sum(e[1] == "demuxed" for e in before),
        "gops_decoded": len(gops),
        "gop_seconds_median": sorted(e[5] for e in gops)[len(gops) // 2] if gops else None,
        "decoder_threads": len(busy),
        "decoder_busy_share": (round(sum(busy.values()) / (len(busy) * (span[1] - span[0])), 3)
                               if busy and span[1] > span[0] else None),
        "wait_seconds": round(sum(e[2] for e in waits), 3),
        "decoder_seconds_by_thread": sorted(round(v, 3) for v in busy.values()),
    }
