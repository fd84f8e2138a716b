"""Where vidloader's worker processes come from: its own fork server.

Every worker (loader workers, index probes, synthetic-video jobs) is a fork of one warm
server process that vidloader starts on first use. The server is a fresh interpreter (exec'd,
not forked from this process), so it never holds this process's CUDA context, threads or
locks; it imports numpy, PyAV, torch and vidloader's worker modules once and never touches
CUDA. Forking it costs milliseconds where a spawned worker re-imports torch (seconds each).

Two things differ from ``multiprocessing.get_context("forkserver")``:

- the server is vidloader's own (:data:`_SERVER`), so the user's forkserver, its preload list
  and the global start method are left alone;
- a worker never imports the user's main module. ``spawn`` and the stdlib forkserver both
  re-run the script that created the loader in each worker (as ``__mp_main__``), which is why
  scripts needed an ``if __name__ == "__main__":`` guard. Workers receive only vidloader's
  own objects (the loader's config, the index), so they need nothing from ``__main__``.

Where fork servers do not exist (Windows), workers are spawned as before and scripts need
the guard (:func:`guard_hint`).
"""

from __future__ import annotations

import io
import multiprocessing
import os
from multiprocessing import context, forkserver, reduction, spawn, util

#: Imported once by the server, so its forks start warm. Never CUDA: importing torch does not
#: initialise it. Strings, not imports: this module stays light and below every layer.
PRELOAD = ("numpy", "av", "torch", "vidloader.pipeline._worker", "vidloader.index._build",
           "vidloader.synthetic")

HAS_FORK_SERVER = "forkserver" in multiprocessing.get_all_start_methods()

_SERVER = forkserver.ForkServer()
_SERVER.set_forkserver_preload(list(PRELOAD))  # no "__main__": the user's script never runs there

_MAIN_KEYS = ("init_main_from_path", "init_main_from_name")


def _preparation_data(name: str) -> dict:
    """What a child sets up before running its target, without importing ``__main__``."""
    data = spawn.get_preparation_data(name)
    for key in _MAIN_KEYS:
        data.pop(key, None)
    return data


if HAS_FORK_SERVER:
    from multiprocessing import popen_forkserver

    class _Popen(popen_forkserver.Popen):
        """``popen_forkserver.Popen`` on :data:`_SERVER`, with :func:`_preparation_data`.

        Mirrors the stdlib's ``_launch`` (unchanged from Python 3.8 to 3.14); it names the
        module-level server and ``spawn.get_preparation_data`` directly, so it is rewritten
        here rather than wrapped.
        """

        def _launch(self, process_obj) -> None:
            prep_data = _preparation_data(process_obj._name)
            buf = io.BytesIO()
            context.set_spawning_popen(self)
            try:
                reduction.dump(prep_data, buf)
                reduction.dump(process_obj, buf)
            finally:
                context.set_spawning_popen(None)
            self.sentinel, w = _SERVER.connect_to_new_process(self._fds)
            # The child sees its parent die through EOF on a duplicate of the data pipe.
            parent_w = os.dup(w)
            self.finalizer = util.Finalize(self, util.close_fds, (parent_w, self.sentinel))
            with open(w, "wb", closefd=True) as f:
                f.write(buf.getbuffer())
            self.pid = forkserver.read_signed(self.sentinel)

    class WorkerProcess(context.ForkServerProcess):
        """A ``multiprocessing.Process`` forked from vidloader's server."""

        @staticmethod
        def _Popen(process_obj):
            return _Popen(process_obj)

    class _WorkerContext(context.ForkServerContext):
        Process = WorkerProcess

    _CONTEXT = _WorkerContext()
else:  # pragma: no cover - Windows
    _CONTEXT = multiprocessing.get_context("spawn")
    WorkerProcess = _CONTEXT.Process


def worker_context():
    """The ``multiprocessing`` context every vidloader worker is made with: its queues, its
    processes, and ``mp_context`` of a ``ProcessPoolExecutor``."""
    return _CONTEXT


def start_server() -> None:
    """Start the fork server now (it starts on the first worker otherwise); it imports
    :data:`PRELOAD` in the background, so a loader created later starts its workers warm."""
    if HAS_FORK_SERVER:
        _SERVER.ensure_running()


def guard_hint() -> str:
    """The first line to show when a worker died while starting."""
    if HAS_FORK_SERVER:
        return ""
    return ("a worker died while starting: on this platform workers are spawned, and the "
            "script that creates the loader needs an `if __name__ == \"__main__\":` guard. ")
