"""``vidloader bench run``: run workloads × backends, print a table, write JSON and a PNG per
workload (the options are in :mod:`._cli`)."""

from __future__ import annotations

import dataclasses
import os
import shlex
import sys
from pathlib import Path

from ._backends import make_peer, resolve_backends
from ._datasets import load_index, prepare_dataset
from ._harness import RunConfig, run_backend, run_isolated, sized_job
from ._report import environment, format_table, make_report, stem, write_json, write_plot
from ._workloads import Skip, resolve_workloads


def command_line(args) -> str:
    """The canonical command that reproduces ``args``."""
    parts = ["vidloader", "bench", "--workload", args.workload, "--backends", args.backends]
    if args.dataset:
        parts += ["--dataset", args.dataset]
    parts += ["--scale", args.scale, "--batches", str(args.batches), "--warmup", str(args.warmup),
              "--workers", str(args.workers), "--seed", str(args.seed),
              "--max-seconds", f"{args.max_seconds:g}"]
    for flag, value in (("--batch-size", args.batch_size), ("--device", args.device)):
        if value is not None:
            parts += [flag, str(value)]
    parts += ["--out", str(args.out)]
    return shlex.join(parts)


def run(args) -> int:
    """Run every requested workload against every requested backend."""
    try:
        workloads = resolve_workloads(args.workload)
        backends = resolve_backends(args.backends)
    except ValueError as exc:
        print(f"vidloader bench: error: {exc}", file=sys.stderr)
        return 2
    if args.workers is None:
        args.workers = os.cpu_count() or 1
    env = environment(args.note)
    for workload in workloads:
        report = _run_workload(workload, backends, args, env)
        print(format_table(report) + "\n", flush=True)
        base = Path(args.out) / stem(report)
        paths = [write_json(report, base.with_suffix(".json"))]
        if not args.no_plot:
            paths.append(write_plot(report, base.with_suffix(".png")))
        print("wrote " + ", ".join(str(p) for p in paths if p) + "\n", flush=True)
    return 0


def plan_length(cfg: RunConfig, backends: list[str]) -> int:
    """Batches to plan, the same for every backend: the longest warm-up plus timed window of
    the backends that can run here (see :func:`sized_job`)."""
    peers = []
    for name in backends:
        peer = make_peer(name)
        try:
            peer.check()
        except Skip:
            continue
        peers.append(peer)
    try:
        return sized_job(cfg, peers)[1] if peers else cfg.warmup + cfg.batches
    except Exception:  # Skip or a failure: every run will say why, in its own row
        return cfg.warmup + cfg.batches


def _run_workload(workload, backends: list[str], args, env: dict) -> dict:
    name = args.dataset or workload.dataset
    dataset = prepare_dataset(name, args.scale, data_dir=args.data_dir, progress=True)
    load_index(dataset)  # once, here: the runs load it
    base = RunConfig(workload.name, "", name, args.scale, str(dataset.root.parent), args.batches,
                     args.warmup, args.workers, args.seed, args.device, args.batch_size,
                     args.max_seconds, memory_budget=getattr(args, "memory_budget", None))
    base.plan_batches = args.plan_batches = plan_length(base, backends)
    runs = []
    for backend in backends:
        cfg = dataclasses.replace(base, backend=backend)
        print(f"[{workload.name}] {backend} ...", end=" ", flush=True)
        result = run_backend(cfg) if args.no_isolate else run_isolated(cfg, timeout_s=args.timeout)
        print(_one_line(result), flush=True)
        runs.append(result)
    settings = {k: getattr(args, k) for k in ("batches", "warmup", "plan_batches", "workers",
                                              "seed", "device", "batch_size", "scale",
                                              "max_seconds", "memory_budget")
                if hasattr(args, k)}
    settings["isolated"] = not args.no_isolate
    return make_report(workload=workload, dataset=dataset.summary(), settings=settings,
                       command=command_line(args), runs=runs, env=env)


def _one_line(result: dict) -> str:
    if result.get("status") == "ok":
        return f"{result['frames_per_s']:,.0f} frames/s"
    return f"{result.get('status')}: {result.get('reason', '')}"
