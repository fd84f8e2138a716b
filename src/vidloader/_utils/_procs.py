"""Where vidloader's worker processes come from: its own fork servers.

Every worker is a fork of a warm server process that vidloader starts on first use. A server
is a fresh interpreter (exec'd, not forked from this process), so it never holds this
process's CUDA context, threads or locks; it imports its preload list once and never touches
CUDA. Forking it costs milliseconds where a spawned worker re-imports torch (seconds each).
There are three servers, by what their workers need:

- ``"decode"`` (:data:`DECODE_PRELOAD`: numpy, PyAV, vidloader's decode worker modules, no
  torch): CPU decode workers, index probes, synthetic-video jobs;
- ``"demux"`` (:data:`DEMUX_PRELOAD`: numpy, PyAV and the demux worker's module, no torch):
  separation mode's demux workers;
- ``"torch"`` (:data:`TORCH_PRELOAD`): image workers, which crop and resize with torch, and CPU
  decode workers when NVTX ranges are on (they are torch's).

torch costs ~190 MiB of RSS per process on the CPU machine (more with CUDA's libraries) and
~2 s to import there, which a worker that only decodes or demuxes has no use for; a process
without torch cannot create a CUDA context either.

Two things differ from ``multiprocessing.get_context("forkserver")``:

- the servers are vidloader's own (:data:`SERVERS`), so the user's forkserver, its preload list
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

#: Imported once by the decode server, so its forks start warm: CPU decode workers (which
#: write numpy into shared memory, ``pipeline._shared_slots``), index probes and synthetic-video
#: jobs. No torch: ~2 s of the program's first loader on 2 cores, ~190 MiB of RSS per worker
#: (``tests/test_procs.py`` checks that these modules import none). Strings, not imports:
#: this module stays light and below every layer.
DECODE_PRELOAD = ("numpy", "av", "vidloader.pipeline._entry", "vidloader.pipeline._worker",
                  "vidloader.pipeline._config", "vidloader.pipeline._shared_slots",
                  "vidloader.decoding.cpu", "vidloader.index._build", "vidloader.synthetic",
                  "vidloader._utils._freeze")

#: Imported once by the demux server: what a demux worker runs, and no torch (the modules
#: named import none; ``tests/test_procs.py`` checks it).
DEMUX_PRELOAD = ("numpy", "av", "vidloader.pipeline._entry", "vidloader.pipeline._demux",
                 "vidloader._utils._freeze")  # last: freezes what the others imported

#: Imported once by the torch server: image workers, which crop and resize with torch, and
#: CPU decode workers with NVTX ranges on (torch's ``cuda.nvtx``). Never CUDA: importing torch
#: does not initialise it.
TORCH_PRELOAD = ("numpy", "av", "torch", "PIL.Image", "vidloader.pipeline._image_fill",
                 *DECODE_PRELOAD[2:])  # the decode server's modules, _freeze last

#: The servers by name, and what each preloads.
SERVERS = {"decode": DECODE_PRELOAD, "demux": DEMUX_PRELOAD, "torch": TORCH_PRELOAD}

HAS_FORK_SERVER = "forkserver" in multiprocessing.get_all_start_methods()

_MAIN_KEYS = ("init_main_from_path", "init_main_from_name")


def _preparation_data(name: str) -> dict:
    """What a child sets up before running its target, without importing ``__main__``."""
    data = spawn.get_preparation_data(name)
    for key in _MAIN_KEYS:
        data.pop(key, None)
    return data


def _fork_server(preload: tuple) -> forkserver.ForkServer:
    server = forkserver.ForkServer()
    server.set_forkserver_preload(list(preload))  # no "__main__": the user's script never runs there
    return server


if HAS_FORK_SERVER:
    from multiprocessing import popen_forkserver

    class _Popen(popen_forkserver.Popen):
        """``popen_forkserver.Popen`` on :attr:`server`, with :func:`_preparation_data`.

        Mirrors the stdlib's ``_launch`` (unchanged from Python 3.8 to 3.14); it names the
        module-level server and ``spawn.get_preparation_data`` directly, so it is rewritten
        here rather than wrapped. A subclass per server sets :attr:`server`.
        """

        server: forkserver.ForkServer

        def _launch(self, process_obj) -> None:
            prep_data = _preparation_data(process_obj._name)
            buf = io.BytesIO()
            context.set_spawning_popen(self)
            try:
                reduction.dump(prep_data, buf)
                reduction.dump(process_obj, buf)
            finally:
                context.set_spawning_popen(None)
            self.sentinel, w = self.server.connect_to_new_process(self._fds)
            # The child sees its parent die through EOF on a duplicate of the data pipe.
            parent_w = os.dup(w)
            self.finalizer = util.Finalize(self, util.close_fds, (parent_w, self.sentinel))
            with open(w, "wb", closefd=True) as f:
                f.write(buf.getbuffer())
            self.pid = forkserver.read_signed(self.sentinel)

    def _context(name: str, server: forkserver.ForkServer) -> context.ForkServerContext:
        """A ``multiprocessing`` context whose processes are forks of ``server``. Its
        ``Process`` class is a module attribute (``DecodeProcess``, ...): a process object is
        pickled to the server, so its class must be importable by name."""
        popen = type(f"_{name.title()}Popen", (_Popen,), {"server": server, "__module__": __name__})
        process = type(f"{name.title()}Process", (context.ForkServerProcess,), {
            "__doc__": f"A ``multiprocessing.Process`` forked from vidloader's {name} server.",
            "__module__": __name__, "_Popen": staticmethod(popen)})
        globals()[process.__name__] = process
        return type(f"_{name.title()}Context", (context.ForkServerContext,),
                    {"Process": process, "__module__": __name__})()

    _SERVERS = {name: _fork_server(preload) for name, preload in SERVERS.items()}
    _CONTEXTS = {name: _context(name, server) for name, server in _SERVERS.items()}
else:  # pragma: no cover - Windows
    _CONTEXTS = dict.fromkeys(SERVERS, multiprocessing.get_context("spawn"))
    _SERVERS = {}

#: The decode server's ``Process`` class (tests subclass it).
WorkerProcess = _CONTEXTS["decode"].Process


def _check_server(server: str) -> None:
    if server not in SERVERS:
        raise ValueError(f"server={server!r} is not a vidloader fork server; use one of "
                         f"{sorted(SERVERS)}")


def worker_context(server: str = "decode"):
    """The ``multiprocessing`` context a vidloader worker is made with: its queues, its
    processes, and ``mp_context`` of a ``ProcessPoolExecutor``. ``server``: one of
    :data:`SERVERS` (module docstring)."""
    _check_server(server)
    return _CONTEXTS[server]


def start_server(server: str = "decode") -> None:
    """Start fork server ``server`` now (it starts on its first worker otherwise); it imports
    its preload list in the background, so a loader created later starts its workers warm."""
    _check_server(server)
    if HAS_FORK_SERVER:
        _SERVERS[server].ensure_running()


def guard_hint() -> str:
    """The first line to show when a worker died while starting."""
    if HAS_FORK_SERVER:
        return ""
    return ("a worker died while starting: on this platform workers are spawned, and the "
            "script that creates the loader needs an `if __name__ == \"__main__\":` guard. ")
