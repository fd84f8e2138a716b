"""Worker processes come from vidloader's fork server: a script without a main guard works,
and a worker inherits nothing from the loader's process (no CUDA context, no module state)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from .media import make_small_dataset

# The README's quick start as a user saves it: no `if __name__ == "__main__":` guard. Under
# `spawn` every worker re-ran this script and died. The marker module exists only in this
# process: a worker forked from it (or from a server forked from it) would see it.
_SCRIPT = """
import json, sys, types
sys.modules["parent_only_marker"] = types.ModuleType("parent_only_marker")
with open({ran!r}, "a") as f:
    f.write("ran\\n")
import vidloader
from vidloader.pipeline._pool import WorkerProcesses
from tests.media import isolation_report_worker

index = vidloader.build_index({paths!r}, num_workers=2, progress=False)
loader = vidloader.VideoLoader(index, batch_size=8, size=(32, 48), num_workers=2)
batch = next(iter(loader))
loader.shutdown()
pool = WorkerProcesses(isolation_report_worker, ["parent_only_marker"], 1)
report = pool.get()
pool.put(0, None)
pool.shutdown()
print(json.dumps({{"shape": list(batch["frames"].shape), "videos": len(index), "pid": __import__("os").getpid(),
                   "worker": report}}))
"""


def test_quick_start_runs_as_a_script_without_main_guard(tmp_path):
    paths = [str(p) for p in make_small_dataset(tmp_path / "videos", n=3)]
    ran = tmp_path / "ran.txt"
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(_SCRIPT.format(ran=str(ran), paths=paths)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env,
                         timeout=180, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["shape"] == [8, 32, 48, 3] and got["videos"] == 3
    assert ran.read_text() == "ran\n"  # neither probes nor loader workers re-ran the script
    pid, ppid, marker, main_file, cuda = got["worker"]
    assert pid != got["pid"] and ppid != got["pid"]  # forked by the server, not by the script
    assert not marker and main_file is None and not cuda


# What each torch-free server's workers import or unpickle beside the server's preload: a demux
# worker its start message, tasks, index and plans; a CPU decode worker its start message (the
# loader's config, processing specs, labels), its shared slots, the index and plans.
_UNPICKLED = {
    "demux": ["vidloader.pipeline._messages", "vidloader.pipeline._payloads", "vidloader.index",
              "vidloader.sampling", "vidloader.planning", "vidloader.decoding.nvdec._annexb",
              "vidloader._utils._nvtx"],
    "decode": ["vidloader.pipeline._messages", "vidloader.pipeline._shared_slots",
               "vidloader.pipeline._config", "vidloader.pipeline._assemble",
               "vidloader.processing._spec", "vidloader.processing._geometry",
               "vidloader.sampling._labels", "vidloader.decoding.cpu", "vidloader.index",
               "vidloader.sampling", "vidloader.planning"],
}


@pytest.mark.parametrize("server", ["demux", "decode"])
def test_the_torch_free_servers_modules_import_no_torch(server):
    """What the demux and decode fork servers preload, and what their workers unpickle, import
    no torch: not through a package ``__init__`` either (``vidloader``, ``pipeline``,
    ``decoding``, ``processing``, ``nvdec`` re-export lazily)."""
    from vidloader._utils._procs import SERVERS

    modules = [*SERVERS[server], *_UNPICKLED[server]]
    code = (f"import sys\nfor m in {modules!r}: __import__(m)\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'torch'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == "[]"
    assert "torch" not in SERVERS[server]


def _maps(pid: int) -> str:
    with open(f"/proc/{pid}/maps") as f:
        return f.read()


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="reads /proc/PID/maps (Linux)")
def test_cpu_workers_fill_every_output_without_torch(tmp_path):
    """CPU decode workers fill clips with crops, flips, two outputs of different sizes and
    labels, with batches equal to the loader's own process filling them, and afterwards map
    neither libtorch nor libcuda: the config arrives without its device, the slots as one
    shared file of numpy views, and nothing in their path imports torch."""
    import torch

    import vidloader
    from vidloader import Clips, Process, VideoLoader

    paths = make_small_dataset(tmp_path / "videos", n=3)
    index = vidloader.build_index(paths, num_workers=0, progress=False)
    processing = {"input": Process(size=(24, 40), scale=(32, 48), crop="random",
                                   random_flip=True, dtype="float32", normalized=True,
                                   mean=[0.4, 0.5, 0.6], std=[0.2, 0.3, 0.4], layout="tchw"),
                  "target": Process(index_map=[-1, 0, -1], layout="thwc")}

    def batches(workers):
        loader = VideoLoader(index, sampler=Clips(sequence_length=3, stride=2, seed=5),
                             batch_size=4, processing=processing, num_workers=workers,
                             labels=list(range(len(index))), persistent_workers=True)
        try:
            out = [b for _, b in zip(range(4), loader)]
            maps = [_maps(p.pid) for p in loader._pool.procs] if workers else []
        finally:
            loader.shutdown()
        return out, maps

    here, _ = batches(0)
    there, maps = batches(2)
    assert len(maps) == 2
    for m in maps:
        assert "libtorch" not in m and "libcuda" not in m
    for a, b in zip(here, there, strict=True):
        assert a.keys() == b.keys()
        for key in a:
            assert torch.equal(a[key], b[key]), key


@pytest.mark.skipif(not os.path.exists("/proc/self/fd"), reason="reads /proc/self/fd (Linux)")
def test_shared_slots_reach_a_worker_with_its_fork_request():
    """A worker's writes into :class:`SharedSlots` are the loader's tensors' bytes. The file
    is an anonymous memfd; it reaches the worker as a ``Process`` argument (the fork server
    passes the descriptor on), so no copy waits in this process's ``resource_sharer``, and
    the worker keeps only its mapping, no descriptor. Closed slots refuse to be sent again,
    and the tensors still held keep their memory."""
    import pickle

    from vidloader.pipeline._pool import WorkerProcesses
    from vidloader.pipeline._shared_slots import SharedSlots

    from .media import slot_writing_worker

    shared = SharedSlots({"frames": (2, 3, 4), "target": (5,)}, 3)
    assert os.readlink(f"/proc/self/fd/{shared._fd}").startswith("/memfd:vidloader-staging")
    tensors = shared.tensors()
    pool = WorkerProcesses(slot_writing_worker, [0], 1, inherited=shared)
    try:
        pool.put(0, (1, "target", 7))
        assert pool.get() == "written"
        pool.put(0, "fds")
        worker_fds = pool.get()
        pool.put(0, None)
    finally:
        pool.shutdown()
    assert not any("vidloader-staging" in target for target in worker_fds), worker_fds
    assert tensors[1]["target"].tolist() == [7] * 5
    assert int(tensors[0]["target"].sum()) == int(tensors[2]["target"].sum()) == 0
    assert int(tensors[1]["frames"].sum()) == 0  # outputs of a slot do not overlap
    tensors[2]["frames"][1, 2, 3] = 9  # and the arrays see the tensors' writes
    assert shared.arrays()[2]["frames"][1, 2, 3] == 9 and isinstance(shared.arrays()[0]["frames"], np.ndarray)
    assert shared.slot_stride % 4096 == 0  # each slot on pages of its own
    fd = shared._fd
    shared.close()
    assert not os.path.exists(f"/proc/self/fd/{fd}") or "vidloader-staging" not in os.readlink(f"/proc/self/fd/{fd}")
    with pytest.raises(RuntimeError, match="closed"):
        pickle.dumps(shared)
    with pytest.raises(RuntimeError, match="closed"):
        shared.arrays()
    assert tensors[1]["target"].tolist() == [7] * 5  # the views kept keep the memory mapped


def _staging_fds() -> list[str]:
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if "vidloader-staging" in target:
            out.append(target)
    return out


@pytest.mark.skipif(not os.path.exists("/proc/self/fd"), reason="reads /proc/self/fd (Linux)")
def test_a_failed_worker_start_leaves_no_staging_file_behind(tmp_path, monkeypatch):
    """The second of two CPU workers fails to start: the loader raises, and neither its
    descriptor of the slots' file nor a copy parked for a worker that never came (in
    ``multiprocessing.resource_sharer``, where descriptors sent through a queue wait) is left
    in this process."""
    import gc
    from multiprocessing import resource_sharer

    import vidloader
    from vidloader._utils._procs import worker_context

    paths = make_small_dataset(tmp_path / "videos", n=2)
    index = vidloader.build_index(paths, num_workers=0, progress=False)
    process = worker_context("decode").Process
    start, started = process.start, []

    def start_once(self):
        if started:
            raise OSError("no more processes (a test)")
        started.append(self)
        start(self)

    monkeypatch.setattr(process, "start", start_once)
    before = _staging_fds()
    loader = vidloader.VideoLoader(index, batch_size=4, size=(32, 48), num_workers=2)
    with pytest.raises(OSError, match="a test"):
        next(iter(loader))
    loader.shutdown()
    del loader
    gc.collect()
    assert _staging_fds() == before
    assert not getattr(resource_sharer._resource_sharer, "_cache", {})


def test_dropped_shared_slots_close_their_descriptor():
    """Slots dropped without ``close()`` (a pool whose start failed) give their descriptor
    back when collected."""
    import gc

    from vidloader.pipeline._shared_slots import SharedSlots

    shared = SharedSlots({"frames": (4, 4)}, 2)
    fd = shared._fd
    del shared
    gc.collect()
    with pytest.raises(OSError):
        os.fstat(fd)


def test_liveness_is_asked_at_most_every_50_ms_and_a_dead_worker_still_shows_at_once():
    """``poll`` with a short timeout asks each worker whether it lives at most every
    ``ALIVE_CHECK_SECONDS`` (it asked after every empty wait, 500 times a second in the combo,
    holding the GIL its NVDEC threads need); a killed worker is still reported at the next
    poll (its queue ends), and ``check_alive`` always asks."""
    import signal
    import time

    from vidloader.pipeline import _pool
    from vidloader.pipeline._pool import WorkerDied, WorkerProcesses

    from .media import echo_sum_worker

    pool = WorkerProcesses(echo_sum_worker, [(0, np.arange(3)), (1, np.arange(3))], 2)
    asked = []
    for p in pool.procs:
        p.is_alive = (lambda orig: lambda: asked.append(1) or orig())(p.is_alive)
    try:
        t0 = time.monotonic()
        while time.monotonic() - t0 < 0.3:
            assert pool.poll(timeout=0.002) is None
        # about 0.3 s / 50 ms = 6 rounds of 2 workers (not 100+)
        assert len(asked) <= 2 * (0.3 / _pool.ALIVE_CHECK_SECONDS + 2), len(asked)
        before = len(asked)
        pool.check_alive()
        assert len(asked) == before + 2
        os.kill(pool.procs[1].pid, signal.SIGKILL)
        pool.procs[1].join(5)
        t0 = time.monotonic()
        with pytest.raises(WorkerDied, match="killed by signal 9"):
            while time.monotonic() - t0 < 5:
                pool.poll(timeout=0.002)
        assert time.monotonic() - t0 < 0.5
    finally:
        pool.shutdown()


def test_a_demux_worker_runs_without_torch_or_cuda(tmp_path):
    """A demux worker (a fork of the demux server) demuxes real tasks, and afterwards has
    imported no torch module and maps neither libtorch nor libcuda: it cannot create a CUDA
    context. Its packets come back through shared memory that leaves no ``/dev/shm`` entry."""
    import vidloader
    from vidloader import SequentialFrames
    from vidloader.pipeline._messages import DemuxTask, DemuxWorkerStart, PacketsDemuxed
    from vidloader.pipeline._payloads import unpack_payloads
    from vidloader.pipeline._pool import WorkerProcesses

    from ._demux_probe import demux_then_report

    paths = make_small_dataset(tmp_path / "videos", n=2)
    index = vidloader.build_index(paths, num_workers=0, progress=False)
    plan = SequentialFrames().plan_epoch(index, epoch=0, batch_size=8).batch(0)
    shm_before = set(os.listdir("/dev/shm"))
    pool = WorkerProcesses(demux_then_report, [DemuxWorkerStart(0, index, False, None)], 1,
                           server="demux")
    try:
        pool.put(0, DemuxTask(0, [plan], 0, 0, 1))
        pool.put(0, None)
        packets = pool.get()
        assert isinstance(packets, PacketsDemuxed), packets
        bundles = unpack_payloads(packets.light, packets.segment)
        assert len(bundles) == 1 and bundles[0].payload.nbytes == packets.segment.size > 0
        torch_modules, libtorch, libcuda = pool.get()
    finally:
        pool.shutdown()
    assert torch_modules == [] and not libtorch and not libcuda
    assert {e for e in os.listdir("/dev/shm") if not e.startswith("sem.")} <= shm_before


_DIES_SCRIPT = """
import json, os, sys
import vidloader

index = vidloader.build_index({paths!r}, num_workers=1, progress=False)
loader = vidloader.VideoLoader(index, batch_size=8, size=(32, 48), num_workers=2,
                               persistent_workers=True)
next(iter(loader))
print(json.dumps([p.pid for p in loader._pool.procs]), flush=True)
os._exit(0)  # dies as SIGKILL or the OOM killer would leave it: no shutdown, no atexit
"""


def _running(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie, waiting to be reaped, is not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_workers_exit_when_the_loaders_process_dies(tmp_path):
    """A loader's process that dies without shutting down (SIGKILL, the OOM killer) must not
    leave its workers behind: each holds both ends of its task queue, so it never saw the
    queue close and sat in a pipe read for good. They watch the loader's process instead."""
    import time

    paths = [str(p) for p in make_small_dataset(tmp_path / "videos", n=2)]
    script = tmp_path / "dies.py"
    script.write_text(textwrap.dedent(_DIES_SCRIPT.format(paths=paths)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    # Files, not pipes: orphaned workers would hold a pipe open and the run would not return.
    with open(tmp_path / "out.txt", "w") as stdout, open(tmp_path / "err.txt", "w") as stderr:
        code = subprocess.run([sys.executable, str(script)], stdout=stdout, stderr=stderr,
                              env=env, timeout=180, cwd=tmp_path).returncode
    assert code == 0, (tmp_path / "err.txt").read_text()[-3000:]
    workers = json.loads((tmp_path / "out.txt").read_text().strip().splitlines()[-1])
    assert len(workers) == 2
    deadline = time.monotonic() + 30
    while any(map(_running, workers)) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = [pid for pid in workers if _running(pid)]
    for pid in left:  # do not leave them to later tests
        os.kill(pid, 9)
    assert left == [], f"workers {left} outlived the loader's process"


def test_shutdown_with_unread_large_results_neither_hangs_nor_kills_workers():
    """Workers whose large results nobody read (a loader dropped after its first batch): the
    pool reads them while the workers exit, instead of terminating workers mid-message and
    then waiting forever for the rest of a half-written one (seen on the H100: 16 demux
    workers, the startup benchmark hung in shutdown)."""
    import threading

    from vidloader.pipeline._pool import WorkerProcesses

    from .media import flooding_worker

    pool = WorkerProcesses(flooding_worker, [4, 4], 2, server="demux")
    done = threading.Event()
    thread = threading.Thread(target=lambda: (pool.shutdown(), done.set()), daemon=True)
    thread.start()
    assert done.wait(60), "shutdown hung"
    assert [p.exitcode for p in pool.procs] == [0, 0]  # exited, not terminated


def test_a_worker_killed_mid_message_ends_only_its_own_results():
    """A worker killed while it writes a result: the pool reports it dead within seconds,
    and every result of the other worker still arrives whole. With one result queue shared
    by all workers, the killed worker could leave the queue's write lock held or half a
    message in the pipe, and the reader waited for good (the combo hung in about 1 of 7
    runs of its killed-worker test)."""
    import collections
    import signal
    import threading

    from vidloader.pipeline._pool import WorkerDied, WorkerProcesses

    from .media import streaming_worker

    count, size = 30, 2 << 20
    pool = WorkerProcesses(streaming_worker, [(0, count, size), (1, count, size)], 2, server="demux")
    got: dict[int, list] = collections.defaultdict(list)
    deaths: list = []
    killed: list = []
    done = threading.Event()

    def read() -> None:
        while len(got[1]) < count or not deaths:
            try:
                worker, k, payload = pool.get()
            except WorkerDied as dead:
                deaths.append(dead.worker)
                pool.retire(dead.worker)
                continue
            assert len(payload) == size
            got[worker].append(k)
            if len(got[0]) == 2 and not killed:  # its feeder is writing the third
                killed.append(os.kill(pool.procs[0].pid, signal.SIGKILL))
        done.set()

    thread = threading.Thread(target=read, daemon=True)
    try:
        pool.put(0, "go")
        pool.put(1, "go")
        thread.start()
        assert done.wait(60), f"reading hung: {dict(got)}, deaths {deaths}"
        assert deaths == [0]
        assert got[1] == list(range(count))  # the other worker's results, every one, whole
        assert got[0] == list(range(len(got[0]))) and len(got[0]) < count
    finally:
        pool.shutdown()
    assert not any(p.is_alive() for p in pool.procs)


def test_cpu_workers_with_nvtx_come_from_the_torch_server():
    """NVTX ranges are torch's (``torch.cuda.nvtx``): CPU workers that emit them are forks of
    the server with torch preloaded (shared), not of the torch-free one, where each would
    import torch in its first unit; without NVTX they come from the decode server."""
    from types import SimpleNamespace

    from vidloader._utils._procs import SERVERS
    from vidloader.pipeline._pool import cpu_worker_server

    assert cpu_worker_server(SimpleNamespace(nvtx=False)) == "decode"
    assert cpu_worker_server(SimpleNamespace(nvtx=True)) == "torch"
    assert "torch" in SERVERS["torch"] and "vidloader.pipeline._worker" in SERVERS["torch"]
    assert SERVERS["torch"][-1] == SERVERS["decode"][-1] == "vidloader._utils._freeze"
