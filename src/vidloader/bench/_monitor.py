"""Resource sampling during a timed run: CPU time and memory of the process tree (psutil, or
``/proc`` without it), whole-machine CPU (to see what else ran), and GPU / NVDEC utilisation
and memory from ``nvidia-smi`` sampled every 200 ms in a background subprocess.

Memory is the proportional set size (PSS) where the OS gives it: worker processes share the
staging memory and the libraries, and RSS would count those pages once per process. To it is
added what NVDEC's demux workers have sent and the loader not yet received: shared-memory
segments that no process maps (``pipeline._payloads.unread_segment_bytes``; 4.0-4.6 GiB on
1080p random frames before session 20, when the host figure left them out).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time

from .._utils._sysinfo import load_average
from ..pipeline._payloads import unread_segment_bytes

#: Sampling period of the process tree and of ``nvidia-smi``.
SAMPLE_SECONDS = 0.2
#: Find the tree's processes through ``/proc/PID/task/TID/children`` (Linux), reading only the
#: tree's own threads, instead of every process's ``/proc/PID/stat`` on the machine (psutil's
#: ``children(recursive=True)``, and the procfs walk): done every 200 ms, that walk kept the
#: monitor's thread busy ~60% of the time in the loader's process, beside its decoder threads
#: (session15-3's profile). Used where the kernel has those files.
CHILDREN_FILES = True


def _children(pid: int) -> list[int]:
    """``pid``'s direct children, from each of its threads' ``children`` file ([] if gone)."""
    out: list[int] = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(c) for c in f.read().split()]
        except OSError:
            continue
    return out


def _has_children_files() -> bool:
    return os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/children")


def subtree(pid: int) -> list[int] | None:
    """``pid`` and its descendants, through the ``children`` files; ``None`` where the kernel
    has none (or :data:`CHILDREN_FILES` is off)."""
    if not CHILDREN_FILES or not _has_children_files():
        return None
    tree, frontier = [pid], [pid]
    while frontier:
        frontier = [c for p in frontier for c in _children(p)]
        tree += frontier
    return tree
_SMI_QUERY = "index,utilization.gpu,utilization.decoder,memory.used"


class _ProcfsTree:
    """The process tree rooted at ``pid`` read from ``/proc`` (Linux without psutil)."""

    source = "procfs"

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.tick = os.sysconf("SC_CLK_TCK")
        self.page = os.sysconf("SC_PAGE_SIZE")

    def _stat(self, pid: int) -> list[str] | None:
        try:
            with open(f"/proc/{pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()  # after "(comm)", which may hold spaces
        except OSError:
            return None

    def pids(self) -> list[int]:
        tree = subtree(self.pid)
        if tree is not None:
            return tree
        parent = {}
        for name in os.listdir("/proc"):
            if name.isdigit():
                st = self._stat(int(name))
                if st:
                    parent[int(name)] = int(st[1])
        tree, frontier = [self.pid], [self.pid]
        while frontier:
            frontier = [p for p, pp in parent.items() if pp in frontier]
            tree += frontier
        return tree

    def sample(self, memory: bool = True) -> dict[int, tuple[float, int]]:
        """``pid -> (cpu seconds, memory bytes)`` for every live process of the tree (memory
        0 without ``memory``: reading it is the expensive part)."""
        out = {}
        for pid in self.pids():
            st = self._stat(pid)
            if st:
                out[pid] = ((int(st[11]) + int(st[12])) / self.tick,
                            self._memory(pid) if memory else 0)
        return out

    def _memory(self, pid: int) -> int:
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Pss:"):
                        return int(line.split()[1]) * 1024
        except OSError:
            pass
        try:
            with open(f"/proc/{pid}/statm") as f:
                return int(f.read().split()[1]) * self.page
        except OSError:
            return 0

    @staticmethod
    def system_cpu() -> tuple[float, float]:
        """(busy, total) CPU seconds of the whole machine since boot."""
        with open("/proc/stat") as f:
            fields = [float(x) for x in f.readline().split()[1:]]
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0.0)
        tick = os.sysconf("SC_CLK_TCK")
        return (sum(fields[:8]) - idle) / tick, sum(fields[:8]) / tick


class _PsutilTree:
    """The same readings through psutil (any OS)."""

    source = "psutil"

    def __init__(self, pid: int) -> None:
        import psutil

        self.psutil, self.root = psutil, psutil.Process(pid)
        #: The tree's processes by pid, kept from one sample to the next: a ``Process`` object
        #: measures CPU time between two of its own readings.
        self._known: dict = {}

    def sample(self, memory: bool = True) -> dict[int, tuple[float, int]]:
        out = {}
        try:
            procs = self._procs()
        except self.psutil.Error:
            return out
        for p in procs:
            try:
                with p.oneshot():
                    t = p.cpu_times()
                    out[p.pid] = (t.user + t.system, self._memory(p) if memory else 0)
            except self.psutil.Error:
                continue
        return out

    def _procs(self) -> list:
        pids = subtree(self.root.pid)
        if pids is None:
            return [self.root, *self.root.children(recursive=True)]
        known = self._known
        self._known = {pid: known.get(pid) or self.psutil.Process(pid) for pid in pids
                       if pid in known or self.psutil.pid_exists(pid)}
        return list(self._known.values())

    def _memory(self, p) -> int:
        try:
            return int(p.memory_full_info().pss)
        except (self.psutil.Error, AttributeError):
            return int(p.memory_info().rss)

    def system_cpu(self) -> tuple[float, float]:
        t = self.psutil.cpu_times()
        total = sum(tuple(t)[:8])  # the guest fields are already inside user time
        return total - t.idle - getattr(t, "iowait", 0.0), total


def process_tree(pid: int):
    """psutil where installed, else ``/proc``; ``None`` where neither works."""
    try:
        return _PsutilTree(pid)
    except ImportError:
        pass
    return _ProcfsTree(pid) if os.path.exists("/proc/self/stat") else None


class GpuSampler:
    """``nvidia-smi ... -lms 200`` in a background subprocess; lines kept with their time.

    ``query``: its four fields, GPU index, GPU utilisation, an engine's utilisation (NVDEC's
    by default; the image bench asks for the JPEG decoder's, see :func:`jpeg_query`) and
    memory used."""

    def __init__(self, query: str = _SMI_QUERY) -> None:
        self.samples: list[tuple[float, int, float, float, float]] = []
        exe = shutil.which("nvidia-smi")
        self.proc = None
        if exe:
            cmd = [exe, f"--query-gpu={query}", "--format=csv,noheader,nounits",
                   "-lms", str(int(SAMPLE_SECONDS * 1000))]
            try:
                self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE,
                                             stderr=subprocess.DEVNULL, text=True)
            except OSError:
                self.proc = None
        if self.proc is not None:
            threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            parts = [p.strip() for p in line.split(",")]
            try:
                self.samples.append((time.monotonic(), int(parts[0]), *map(_num, parts[1:4])))
            except (ValueError, IndexError):
                continue  # "[N/A]" on GPUs without a decoder counter, or a partial line

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()

    def summary(self, t0: float, t1: float) -> dict:
        """Means over [t0, t1] of the busiest GPU, and its memory peak above the baseline."""
        if self.proc is None:
            return {}
        by_gpu: dict[int, list] = {}
        for s in self.samples:
            by_gpu.setdefault(s[1], []).append(s)
        best = {}
        for rows in by_gpu.values():
            window = [r for r in rows if t0 <= r[0] <= t1] or rows[-1:]
            before = [r for r in rows if r[0] < t0] or rows[:1]
            util = sum(r[2] for r in window) / len(window)
            if not best or util > best["gpu_util_pct"]:
                best = {
                    "gpu_util_pct": util,
                    "nvdec_util_pct": sum(r[3] for r in window) / len(window),
                    "gpu_mem_peak_bytes": int(max(r[4] for r in rows) * 2**20),
                    "gpu_mem_baseline_bytes": int(min(r[4] for r in before) * 2**20),
                }
        return best


def _num(text: str) -> float:
    return float(text)


def jpeg_query() -> str | None:
    """:class:`GpuSampler`'s query with the hardware JPEG decoder's utilisation in NVDEC's
    place, where this ``nvidia-smi`` reports it as a number (``utilization.jpeg``, recent
    drivers); else its usual query where ``nvidia-smi`` answers that; ``None`` without one."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    for query in (_SMI_QUERY.replace("utilization.decoder", "utilization.jpeg"), _SMI_QUERY):
        try:
            done = subprocess.run([exe, f"--query-gpu={query}", "--format=csv,noheader,nounits"],
                                  capture_output=True, text=True, timeout=10)
            _num(done.stdout.splitlines()[0].split(",")[2])  # "[N/A]" where not reported
        except (OSError, subprocess.TimeoutExpired, IndexError, ValueError):
            continue
        if done.returncode == 0:
            return query
    return None


#: Seconds between two memory readings of the process tree. PSS comes from each process's
#: smaps: about 10 ms for one process holding torch, more with shared-memory slots mapped.
#: Read every 200 ms, with the process tree walk, it took 20% of the demo's throughput on
#: 2 cores (181 against 226 frames/s, session 7).
MEMORY_SECONDS = 1.0


class Monitor:
    """Samples the process tree of ``pid`` (and the machine) every 200 ms from :meth:`start` to
    :meth:`stop`, its memory every ``memory_seconds`` (``None``: never); :meth:`summary`
    reports on any time window inside that span."""

    def __init__(self, pid: int | None = None, *, memory_seconds: float | None = MEMORY_SECONDS,
                 interval: float = SAMPLE_SECONDS) -> None:
        self.tree = process_tree(pid or os.getpid())
        self.memory_seconds, self.interval = memory_seconds, interval
        self._memory_at = -float("inf")
        self.gpu = GpuSampler()
        #: (time, {pid: cpu seconds}, tree memory bytes, machine busy s, machine total s)
        self.samples: list[tuple[float, dict, int, float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self.load = [load_average()]
        #: Most bytes of demux segments sent and not yet received at one memory reading
        #: (counted in the host memory too).
        self.peak_unread_segment_bytes = 0

    def start(self) -> Monitor:
        self._sample()
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def _sample(self) -> None:
        if self.tree is None:
            return
        now = time.monotonic()
        memory = self.memory_seconds is not None and now - self._memory_at >= self.memory_seconds
        if memory:
            self._memory_at = now
        snap = self.tree.sample(memory)
        busy, total = self.tree.system_cpu()
        cpu = {pid: c for pid, (c, _) in snap.items()}
        tree_memory = 0
        if memory:
            unread = unread_segment_bytes()
            self.peak_unread_segment_bytes = max(self.peak_unread_segment_bytes, unread)
            tree_memory = sum(m for _, m in snap.values()) + unread
        self.samples.append((now, cpu, tree_memory, busy, total))

    def stop(self) -> None:
        """Stop sampling (once; later calls do nothing)."""
        if self._stop.is_set():
            return
        self._stop.set()
        self._thread.join(timeout=5)
        self._sample()
        self.gpu.stop()
        self.load.append(load_average())

    def _bracket(self, t0: float, t1: float):
        """The last sample at or before ``t0`` and the first at or after ``t1``."""
        before = [s for s in self.samples if s[0] <= t0] or self.samples[:1]
        after = [s for s in self.samples if s[0] >= t1] or self.samples[-1:]
        return before[-1], after[0]

    def summary(self, t0: float, t1: float) -> dict:
        """CPU, memory and GPU figures of the window ``[t0, t1]`` (``time.monotonic()``)."""
        out: dict = {"monitor": self.tree.source if self.tree else "none", "load_avg": self.load}
        if len(self.samples) >= 2:
            a, b = self._bracket(t0, t1)
            wall = max(b[0] - a[0], 1e-9)
            # A process born inside the window counts from 0: all its CPU time is the run's.
            busy = sum(c - a[1].get(pid, 0.0) for pid, c in b[1].items())
            cores = os.cpu_count() or 1
            machine = 100 * (b[3] - a[3]) / max(b[4] - a[4], 1e-9)
            out.update(cpu_util_pct=100 * busy / (wall * cores), cpu_cores_busy=busy / wall,
                       machine_cpu_pct=machine,
                       other_cpu_pct=max(0.0, machine - 100 * busy / (wall * cores)),
                       peak_host_memory_bytes=max(s[2] for s in self.samples) or None,
                       peak_unread_segment_bytes=self.peak_unread_segment_bytes)
        out.update(self.gpu.summary(t0, t1))
        return out

