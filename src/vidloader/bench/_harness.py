"""Run one (workload, backend) pair: warm up, time, and collect the resource figures.

Every run gets its own Python process by default (``run_isolated``), so peak memory is the
run's own, a crashing native library (decord's aborts) costs one row, not the benchmark, and
nothing a previous backend left behind (threads, caches, a CUDA context) slows the next one.

Run as ``python -m vidloader.bench._harness CONFIG.json RESULT.json`` by the isolation code.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import traceback

import torch

from ._backends import make_peer
from ._monitor import Monitor
from ._peers import Job, Peer, root_cause
from ._workloads import WORKLOADS, Skip, make_plan

#: Last characters of a failed child's output kept in the report.
_TAIL_CHARS = 1500


@dataclasses.dataclass
class RunConfig:
    """One run, JSON-able (it crosses into the isolated child process).

    Attributes:
        workload (str), backend (str): what to run.
        dataset (str), scale (str), data_dir (str | None): the dataset (already generated).
        batches (int): timed batches; warmup (int): untimed batches before them.
        workers (int): worker processes of every loader (threads for the NVDEC ceiling).
        seed (int): sampler seed (the same plan for every backend).
        device (str | None): move every batch there (``"cuda"``: the training device).
        batch_size (int | None): override the workload's batch size.
        max_seconds (float | None): stop the timed window after about this long (slow peers).
        plan_batches (int | None): batches planned (default ``warmup + batches``): the same
            plan for every backend, long enough for the deepest backend's warm-up.
        memory_budget (str | None): ``VideoLoader(memory_budget=...)`` of the NVDEC and
            combo loaders (``None``: none).
    """

    workload: str
    backend: str
    dataset: str
    scale: str
    data_dir: str | None = None
    batches: int = 20
    warmup: int = 2
    workers: int = 2
    seed: int = 0
    device: str | None = None
    batch_size: int | None = None
    max_seconds: float | None = 60.0
    plan_batches: int | None = None
    memory_budget: str | None = None


def build_job(cfg: RunConfig) -> Job:
    """The dataset's index and the shared plan of ``warmup + batches`` batches."""
    from ._datasets import load_index, prepare_dataset

    workload = WORKLOADS[cfg.workload]
    dataset = prepare_dataset(cfg.dataset, cfg.scale, data_dir=cfg.data_dir)
    index = load_index(dataset)
    plan = make_plan(workload, index, dataset, batches=cfg.plan_batches or cfg.warmup + cfg.batches,
                     seed=cfg.seed, batch_size=cfg.batch_size)
    return Job(plan.index, plan, workload, cfg.workers, cfg.device, cfg.memory_budget)


@dataclasses.dataclass(frozen=True)
class RunLengths:
    """How many batches a backend consumes.

    Attributes:
        warmup (int): untimed batches: at least ``--warmup`` and the backend's prefetch depth.
        timed (int): batches timed: at least ``--batches`` and :data:`MIN_CYCLES` cycles.
        min_timed (int): batches timed before ``max_seconds`` may end the window.
    """

    warmup: int
    timed: int
    min_timed: int


#: Production cycles (every worker delivering one unit) a timed window spans at least.
MIN_CYCLES = 3


def run_lengths(peer: Peer, job: Job, cfg: RunConfig) -> RunLengths:
    """The warm-up and the timed window of ``peer`` (see :meth:`Peer.pipeline`)."""
    depth, cycle = peer.pipeline(job)
    min_timed = MIN_CYCLES * cycle
    return RunLengths(max(cfg.warmup, depth), max(cfg.batches, min_timed), min_timed)


def sized_job(cfg: RunConfig, peers: list[Peer]) -> tuple[Job, int]:
    """A job whose plan is long enough for every peer's warm-up and timed window, and that
    length. The plan is at least ``cfg.plan_batches`` long (the same plan for every backend)."""
    n = cfg.plan_batches or cfg.warmup + cfg.batches
    for _ in range(4):  # a longer plan may repeat the index, which may change a pipeline
        job = build_job(dataclasses.replace(cfg, plan_batches=n))
        lengths = [run_lengths(p, job, cfg) for p in peers]
        need = max(n, *(r.warmup + r.timed for r in lengths))
        if need == n:
            break
        n = need
    return job, n


def run_backend(cfg: RunConfig) -> dict:
    """Run ``cfg`` in this process; never raises (a failure is a result with its reason)."""
    result: dict = {"backend": cfg.backend, "workload": cfg.workload}
    try:
        peer = make_peer(cfg.backend)
        result.update(ceiling=peer.ceiling, note=peer.note, peer_settings=peer.settings())
        peer.check()
        job, _ = sized_job(cfg, [peer])
        lengths = run_lengths(peer, job, cfg)
        result.update(measure(peer, job, lengths, cfg.max_seconds))
        result["peer_settings"] = peer.settings()  # with what the run chose (DALI's sequences)
        result["status"] = "ok"
    except Skip as exc:
        result.update(status="skipped", reason=str(exc))
    except Exception as exc:
        result.update(status="failed", reason=root_cause(exc),
                      traceback=traceback.format_exc()[-_TAIL_CHARS:])
    return result


def _sync() -> None:
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def _next(gen):
    try:
        return next(gen)
    except StopIteration:
        raise RuntimeError("the backend delivered fewer batches than planned") from None


def _consume(batch, job: Job) -> tuple[int, list[int] | None]:
    """Frames in a delivered batch (moved to the job's device, cameras split out)."""
    if isinstance(batch, int):  # a decode-only ceiling reports counts
        return batch, None
    if job.device and batch.device != torch.device(job.device):
        batch = batch.to(job.device, non_blocking=True)
    if job.workload.cameras > 1:
        c = job.workload.cameras
        batch = batch.view(batch.shape[0] // c, c, *batch.shape[1:])
    return int(batch.shape[:-3].numel()), list(batch.shape)


def measure(peer: Peer, job: Job, lengths: RunLengths, max_seconds: float | None = None) -> dict:
    """Deliver ``lengths.warmup + lengths.timed`` batches, then report steady-state throughput.

    The timed window starts after the warm-up batches *and* after the burst they belong to:
    loaders deliver in bursts (every worker finishes its unit of batches at about the same
    time), and a window opened inside a burst would count the rest of it as free. Past
    ``max_seconds`` of timed window (and ``lengths.min_timed`` batches) the run stops at the
    next end of a burst.

    Returns:
        ``frames_per_s`` (steady state), ``frames``, ``seconds``, ``window_batches``,
        ``end_to_end_frames_per_s`` (start-up included), ``first_batch_s``, ``batch_shape``,
        per-batch ``arrivals_s``, decode counters and the :class:`Monitor` figures of the
        window.
    """
    monitor = Monitor().start()
    gen = peer.batches(job)
    arrivals, counts, counters, shape = [], [], [], None
    try:
        begin = time.monotonic()
        warmup = lengths.warmup
        for _ in job.plan.batches[: warmup + lengths.timed]:
            n, got = _consume(_next(gen), job)
            _sync()
            arrivals.append(time.monotonic())
            counts.append(n)
            counters.append(peer.counters())
            shape = got or shape
            if _out_of_time(arrivals, warmup, lengths.min_timed, max_seconds):
                arrivals.pop()  # it opened a new burst: the window ends before it
                break
    finally:
        monitor.stop()  # first: its last sample must still see the workers (closing stops them)
        gen.close()
    s, e = steady_window(arrivals, warmup)
    frames, seconds = sum(counts[s + 1 : e + 1]), arrivals[e] - arrivals[s]
    out = {"frames": frames, "seconds": seconds, "frames_per_s": frames / seconds,
           "window_batches": e - s, "batches": len(arrivals) - warmup, "warmup_batches": warmup,
           "planned_timed_batches": lengths.timed, "min_timed_batches": lengths.min_timed,
           "end_to_end_frames_per_s": sum(counts[: e + 1]) / (arrivals[e] - begin),
           "first_batch_s": arrivals[0] - begin, "batch_shape": shape,
           "arrivals_s": [round(t - begin, 4) for t in arrivals],
           **_decode_counts(counters[s], counters[e])}
    out.update(monitor.summary(arrivals[s], arrivals[e]))
    out = _gpu_memory(out)
    plan = peer.memory_plan()
    if plan is not None:  # next to the peak it plans for
        out["memory_plan"] = plan
    return out


def _small_gap(arrivals: list[float], s: int, e: int) -> float:
    """Gaps below a quarter of the mean interval are inside a burst."""
    return 0.25 * (arrivals[e] - arrivals[s]) / max(1, e - s)


def _out_of_time(arrivals: list[float], warmup: int, min_timed: int,
                 max_seconds: float | None) -> bool:
    """Past the time limit and ``min_timed`` timed batches, and the last batch started a new
    burst."""
    i, s = len(arrivals) - 1, max(0, warmup - 1)
    if not max_seconds or i < s + max(3, min_timed) or arrivals[i - 1] - arrivals[s] < max_seconds:
        return False
    return arrivals[i] - arrivals[i - 1] > _small_gap(arrivals, s, i - 1)


def steady_window(arrivals: list[float], warmup: int) -> tuple[int, int]:
    """Batches ``s + 1 .. e`` and the time ``arrivals[e] - arrivals[s]`` they took.

    ``s`` is the last warm-up batch, moved forward to the end of its burst (a batch followed
    by a gap of at least a quarter of the mean interval); ``e`` is the last batch.
    """
    n = len(arrivals)
    s, e = max(0, min(warmup, n - 1) - 1), n - 1
    if e - s < 2:
        return s, e
    small = _small_gap(arrivals, s, e)
    while s + 2 <= e and arrivals[s + 1] - arrivals[s] < small:
        s += 1
    return s, e


def _decode_counts(before: dict | None, after: dict | None) -> dict:
    if not before or not after:
        return {"decoded_per_delivered": None}
    delta = {k: after[k] - before.get(k, 0) for k in after}
    # 0 decoded is real where a frame cache served every frame (vidloader's NVDEC backend).
    ratio = delta["decoded"] / delta["delivered"] if delta.get("delivered") else None
    return {"decoded_per_delivered": ratio, "decode_counts": delta}


def _gpu_memory(out: dict) -> dict:
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        out["torch_peak_allocated_bytes"] = int(torch.cuda.max_memory_allocated())
    if "gpu_mem_peak_bytes" in out:
        out["peak_gpu_memory_bytes"] = out["gpu_mem_peak_bytes"] - out["gpu_mem_baseline_bytes"]
    elif "torch_peak_allocated_bytes" in out:
        out["peak_gpu_memory_bytes"] = out["torch_peak_allocated_bytes"]
    for key in ("gpu_util_pct", "nvdec_util_pct", "peak_gpu_memory_bytes"):
        out.setdefault(key, None)  # same keys on every machine; None where nothing to read
    return out


def run_isolated(cfg: RunConfig, *, timeout_s: float = 900.0) -> dict:
    """Run ``cfg`` in a fresh Python process (its own session, killed whole on timeout)."""
    with tempfile.TemporaryDirectory(prefix="vidloader-bench-") as tmp:
        cfg_path, res_path = os.path.join(tmp, "config.json"), os.path.join(tmp, "result.json")
        with open(cfg_path, "w") as f:
            json.dump(dataclasses.asdict(cfg), f)
        cmd = [sys.executable, "-m", "vidloader.bench._harness", cfg_path, res_path]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, start_new_session=True)
        try:
            output, _ = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the child and the workers it started
            output, _ = proc.communicate()
            return _failed(cfg, f"timed out after {timeout_s:.0f} s", output)
        if os.path.exists(res_path):
            with open(res_path) as f:
                return json.load(f)
        return _failed(cfg, f"the benchmark process exited with status {proc.returncode}", output)


def _failed(cfg: RunConfig, reason: str, output: str) -> dict:
    return {"backend": cfg.backend, "workload": cfg.workload, "status": "failed",
            "reason": reason, "traceback": (output or "")[-_TAIL_CHARS:]}


def _child_main(argv: list[str]) -> int:
    with open(argv[0]) as f:
        cfg = RunConfig(**json.load(f))
    result = run_backend(cfg)
    with open(argv[1], "w") as f:
        json.dump(result, f, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(_child_main(sys.argv[1:]))
