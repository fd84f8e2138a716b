"""Where a process's threads spend their time: a sampling profiler for diagnosing the loader.

Every ``interval`` seconds a background thread reads every thread's Python stack
(``sys._current_frames``) and counts, per thread group (the thread name without its number:
``MainThread``, ``vidloader-nvdec`` …) and per phase (a label the caller sets, e.g.
``"startup"`` then ``"steady"``), the innermost frame and the innermost frame inside vidloader.
A thread blocked in C (a decode call, a queue wait) shows the Python line that called it, so
the counts say where wall time goes, not only where the GIL is held. It is a diagnostic for
``vidloader bench sweep --profile``; it only reads stacks, and nothing in the library depends
on it.
"""

from __future__ import annotations

import collections
import re
import sys
import threading


def _group(name: str) -> str:
    return re.sub(r"[_-]?\d+$", "", name)


def _where(frame) -> str:
    code = frame.f_code
    return f"{code.co_filename.rsplit('/', 2)[-1]}:{frame.f_lineno} {code.co_name}"


class StackSampler:
    """Samples every thread's stack until :meth:`stop`; :meth:`summary` reports the counts.

    Args:
        interval: seconds between samples.
        package: path fragment that marks "our" frames (``/vidloader/``).
    """

    def __init__(self, interval: float = 0.005, package: str = "/vidloader/") -> None:
        self.interval, self.package = interval, package
        self.phase = "startup"
        self.leaf: collections.Counter = collections.Counter()
        self.ours: collections.Counter = collections.Counter()
        self.samples: collections.Counter = collections.Counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="stack-sampler", daemon=True)

    def start(self) -> StackSampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _loop(self) -> None:
        me = threading.get_ident()
        while not self._stop.wait(self.interval):
            names = {t.ident: t.name for t in threading.enumerate()}
            phase = self.phase
            for ident, frame in sys._current_frames().items():
                if ident == me:
                    continue
                group = _group(names.get(ident, "?"))
                self.samples[(phase, group)] += 1
                self.leaf[(phase, group, _where(frame))] += 1
                f = frame
                while f is not None and self.package not in f.f_code.co_filename:
                    f = f.f_back
                self.ours[(phase, group, _where(f) if f is not None else "(outside vidloader)")] += 1

    def summary(self, top: int = 12) -> dict:
        """``{phase: {group: {"samples": n, "leaf": [[where, share]...], "ours": [...]}}}``."""
        out: dict = {}
        for (phase, group), n in self.samples.items():
            entry = out.setdefault(phase, {}).setdefault(group, {"samples": n})
            for key, counter in (("leaf", self.leaf), ("ours", self.ours)):
                rows = [(w, c) for (p, g, w), c in counter.items() if p == phase and g == group]
                rows.sort(key=lambda r: -r[1])
                entry[key] = [[w, round(c / n, 3)] for w, c in rows[:top]]
        return out
