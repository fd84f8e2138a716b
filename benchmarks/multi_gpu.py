"""Data-parallel throughput of vidloader under torchrun, one rank per GPU (issue 19).

Each rank joins the process group (NCCL on ``cuda:$LOCAL_RANK`` with ``--backend nvdec``,
gloo with ``--backend cpu``), builds the bench workload's ``VideoLoader`` exactly as
``vidloader bench run`` builds it for ``vidloader-nvdec`` (``vidloader``: CPU), sharded by
``RANK``/``WORLD_SIZE``, and per batch takes a tiny training step (a strided view of the
frames through a small conv net, backward) followed by one all-reduce of the gradients and a
stop flag, so the ranks stay in step and stop together. Rank 0 gathers every rank's figures
(``dist.all_gather_object``) and writes one JSON file::

    python -m torch.distributed.run --standalone --nproc_per_node=2 benchmarks/multi_gpu.py \\
        --workload random --data /tmp/bench-data --scale gpu-quick --out random-2.json

Timing (as ``vidloader bench run``): a warm-up of at least the loader's pipeline depth, then a
window of at least three production cycles; ``--seconds`` ends the window at the next end of
a burst past that time (``--batches N``: exactly N timed batches). Each rank's figure is its
steady window (``_harness.steady_window``); ``total_frames_per_s`` is their sum.

What the ranks received is checked every run: each rank's batches against its shard of the
sampler's plan, and the union of all ranks' (video, frame) rows against the single-process
epoch (the first ``W·k`` batches of it after ``k`` batches per rank). ``--record`` runs one
whole short epoch (``--batches`` per rank, default 4, no warm-up), so the union must be the
whole epoch, each sample exactly once, with equal batch counts on every rank. A failed check
makes rank 0 exit with status 3.

``--shard contiguous`` replaces the library's sharding (rank ``r`` takes epoch positions
``r, r+W, …``) with contiguous blocks of the single-process epoch's batches, for comparison
on stream-order workloads: interleaved, both ranks' batches fall in the same GOPs, so each
rank decodes frames only the other delivers. ``--summarize DIR`` prints the 1 GPU / 2 GPU table of the JSON
files in DIR (``benchmarks/multi_gpu.sh`` runs it).
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import datetime
import json
import os
import resource
import sys
import time
import traceback
from pathlib import Path

SHARDS = ("library", "contiguous")
#: The speed-up issue 19 asks for, 2 GPUs against 1.
TARGET_RATIO = 1.9


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workload", default="random",
                   help="random, sequential, multicam-stream, multicam-random (bench workloads)")
    p.add_argument("--data", default=None, help="parent directory of the bench datasets "
                   "(prepare_dataset's data_dir; rank 0 generates a missing one)")
    p.add_argument("--scale", default="gpu-quick")
    p.add_argument("--backend", choices=["nvdec", "cpu"], default="nvdec")
    p.add_argument("--num-workers", type=int, default=14, help="CPU worker processes per rank")
    p.add_argument("--batch-size", type=int, default=None, help="rows per batch (default: the "
                   "workload's; a multiple of the cameras for multicam)")
    p.add_argument("--warmup-batches", type=int, default=None,
                   help="untimed batches (default: the loader's pipeline depth, at least 2)")
    p.add_argument("--seconds", type=float, default=10.0, help="timed window, about")
    p.add_argument("--batches", type=int, default=None,
                   help="exactly this many timed batches per rank (instead of --seconds); "
                        "with --record: the epoch's batches per rank (default 4)")
    p.add_argument("--max-batches", type=int, default=300,
                   help="with --seconds: at most this many timed batches per rank (the epoch "
                        "is planned this long)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--shard", choices=SHARDS, default="library")
    p.add_argument("--sync", choices=["step", "none"], default="step",
                   help="step: one all-reduce per batch (ranks in lockstep, as in DDP); none: "
                        "no collective until the end (each rank alone: what lockstep costs)")
    p.add_argument("--cores", type=int, default=None, metavar="K",
                   help="pin local rank r (its loader's workers too) to cores r*K ... r*K+K-1, "
                        "to see whether the ranks compete for the host's cores")
    p.add_argument("--loader-option", action="append", default=[], metavar="KEY=VALUE",
                   help="a VideoLoader argument over the bench's (VALUE read as JSON, else a "
                        "string), e.g. prefetch=6; repeatable")
    p.add_argument("--record", action="store_true",
                   help="exactly-once run: one whole short epoch, every rank to its end")
    p.add_argument("--out", default=None, help="JSON file (written by rank 0)")
    p.add_argument("--note", default="")
    p.add_argument("--summarize", default=None, metavar="DIR",
                   help="no run: print the table of DIR/*.json, write --out")
    return p.parse_args(argv)


# -- sharding -----------------------------------------------------------------------------------


def contiguous_shards(inner):
    """``inner`` sharded in contiguous blocks: rank ``r`` of ``W`` takes batches
    ``r·L … (r+1)·L − 1`` of the single-process epoch (``L`` = its batches // ``W``), so a
    stream-order sampler walks each rank through its own stretch of the stream."""
    from vidloader.sampling import EpochPlan, Sampler

    class _Block(EpochPlan):
        def __init__(self, whole, rank: int, length: int) -> None:
            self.whole, self.rank, self.length = whole, rank, length

        def __len__(self) -> int:
            return self.length

        def batch(self, batch_index: int):
            if not 0 <= batch_index < self.length:
                raise IndexError(f"batch {batch_index} of {self.length}")
            bp = self.whole.batch(self.rank * self.length + batch_index)
            return dataclasses.replace(bp, batch_index=batch_index)

    class ContiguousShards(Sampler):
        is_clip, rows_per_sample = inner.is_clip, inner.rows_per_sample
        wrapped = inner

        def num_samples(self, index) -> int:
            return inner.num_samples(index)

        def plan_epoch(self, index, *, epoch, batch_size, rank=0, world_size=1, drop_last=False):
            whole = inner.plan_epoch(index, epoch=epoch, batch_size=batch_size, drop_last=True)
            return _Block(whole, rank, len(whole) // world_size)

        def config(self) -> dict:
            return {"type": "ContiguousShards", "sampler": inner.config()}

    return ContiguousShards()


def global_batches(shard: str, rank: int, world: int, per_rank: int, k: int) -> list[int]:
    """Batches of the single-process epoch that rank ``rank``'s first ``k`` batches cover
    together with the other ranks' (``library``: the ranks interleave positions, so ``k``
    batches on every rank are the first ``W·k`` single-process batches; only rank 0 lists
    them)."""
    if shard == "contiguous":
        return [rank * per_rank + b for b in range(k)]
    return list(range(world * k)) if rank == 0 else []


# -- the run ------------------------------------------------------------------------------------


def setup(backend: str):
    """Join the process group: NCCL on ``cuda:$LOCAL_RANK`` for NVDEC, else gloo on CPU."""
    import torch
    import torch.distributed as dist

    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    timeout = datetime.timedelta(seconds=int(os.environ.get("MGPU_PG_TIMEOUT_S", "300")))
    if backend == "nvdec":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", device_id=device, timeout=timeout)
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo", timeout=timeout)
    return dist.get_rank(), dist.get_world_size(), local_rank, device


def make_model(device):
    import torch
    from torch import nn

    torch.manual_seed(0)  # the same initial weights on every rank
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, stride=2), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        nn.Linear(8, 1),
    ).to(device)


def pin_cores(local_rank: int, per_rank: int) -> list[int]:
    """Pin this process to ``per_rank`` cores of its own (local rank ``r``: cores ``r·K`` to
    ``r·K + K − 1`` of those it may use), before its loader starts: the loader's worker
    processes inherit the mask. Returns the cores."""
    allowed = sorted(os.sched_getaffinity(0))
    cores = allowed[local_rank * per_rank:(local_rank + 1) * per_rank]
    if len(cores) < per_rank:
        raise SystemExit(f"--cores {per_rank}: local rank {local_rank} needs cores "
                         f"{local_rank * per_rank}-{(local_rank + 1) * per_rank - 1}, "
                         f"this machine allows {len(allowed)}")
    os.sched_setaffinity(0, cores)
    return cores


def loader_options(pairs: list[str]) -> dict:
    """``--loader-option KEY=VALUE`` pairs as VideoLoader keyword arguments."""
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SystemExit(f"--loader-option wants KEY=VALUE, got {pair!r}")
        try:
            out[key] = json.loads(value)
        except ValueError:
            out[key] = value
    return out


def train_step(model, optimizer, frames, stop: bool, world: int, sync: bool = True) -> bool:
    """Forward and backward on a strided view of the batch (about 112 px on the long side),
    then one all-reduce of the gradients and the stop flags; returns whether any rank stops.
    ``sync=False``: no all-reduce (the rank's own gradients, undivided, and stop flag)."""
    import torch
    import torch.distributed as dist

    x = frames.flatten(0, -4)  # cameras or clips out: [N, H, W, C]
    s = max(1, max(x.shape[1], x.shape[2]) // 112)
    x = x[:, ::s, ::s].permute(0, 3, 1, 2).float() / 255
    loss = model(x).square().mean()
    optimizer.zero_grad(set_to_none=False)
    loss.backward()
    params = list(model.parameters())
    flat = torch.cat([p.grad.reshape(-1) for p in params]
                     + [torch.tensor([float(stop)], device=x.device)])
    if sync:
        dist.all_reduce(flat)  # the ranks meet here every step
    share = world if sync else 1
    offset = 0
    for p in params:
        p.grad.copy_(flat[offset : offset + p.numel()].view_as(p) / share)
        offset += p.numel()
    optimizer.step()
    return flat[-1].item() > 0  # waits for the all-reduce: ranks move in lockstep


def build(args, rank: int, world: int, device):
    """The workload's dataset, plan, sampler and bench ``Job``; the peer that makes loaders;
    the warm-up, the least and the most timed batches, the batches planned per rank."""
    import torch.distributed as dist

    from vidloader.bench._datasets import load_index, prepare_dataset
    from vidloader.bench._harness import MIN_CYCLES
    from vidloader.bench._peers import Job, VidloaderNvdecPeer, VidloaderPeer
    from vidloader.bench._workloads import WORKLOADS, make_plan

    workload = WORKLOADS[args.workload]
    if rank == 0:  # generates and indexes what is missing; then the others read it
        dataset = prepare_dataset(workload.dataset, args.scale, data_dir=args.data)
        index = load_index(dataset)
    dist.barrier()
    if rank != 0:
        dataset = prepare_dataset(workload.dataset, args.scale, data_dir=args.data)
        index = load_index(dataset)
    peer = VidloaderNvdecPeer() if args.backend == "nvdec" else VidloaderPeer()
    peer.loader_options = {**peer.loader_options, **loader_options(args.loader_option)}
    peer.check()
    device_name = str(device) if device.type == "cuda" else None

    def job_for(per_rank: int):
        # An epoch of exactly `per_rank` full batches on each of the `world` ranks.
        plan = make_plan(workload, index, dataset, batches=world * per_rank, seed=args.seed,
                         batch_size=args.batch_size)
        plan.batches = []  # the single-process batch list is not used here
        if args.shard == "contiguous":
            plan.sampler = contiguous_shards(plan.sampler)
        return Job(plan.index, plan, workload, args.num_workers, device_name)

    if args.record:
        per_rank = args.batches or 4
        return workload, dataset, peer, job_for(per_rank), 0, per_rank, per_rank, per_rank
    depth, cycle = peer.pipeline(job_for(1))
    warmup = args.warmup_batches if args.warmup_batches is not None else max(2, depth)
    if args.batches:
        min_timed = timed = args.batches
    else:
        min_timed = MIN_CYCLES * cycle
        timed = max(args.max_batches, min_timed)
    per_rank = warmup + timed + 1  # + the batch that opens a new burst past --seconds
    return workload, dataset, peer, job_for(per_rank), warmup, min_timed, timed, per_rank


def _stop_flag(args, i: int, arrivals: list, warmup: int, min_timed: int) -> bool:
    from vidloader.bench._harness import _out_of_time

    if args.record:
        return False  # the whole epoch, on every rank
    if args.batches:
        return i + 1 >= warmup + args.batches
    return _out_of_time(arrivals, warmup, min_timed, args.seconds)


def run_rank(args, rank: int, world: int, local_rank: int, device) -> dict:
    """This rank's loop; returns its figures, the rows it received (``_rows``) and, for the
    report, what it ran (``_context``)."""
    import numpy as np
    import torch
    import torch.distributed as dist

    from vidloader.bench._harness import _decode_counts, steady_window
    from vidloader.bench._monitor import Monitor
    from vidloader.bench._peers import _check_same_batch

    workload, dataset, peer, job, warmup, min_timed, timed, per_rank = build(
        args, rank, world, device)
    samples = job.plan.samples_per_batch
    own_plan = job.plan.sampler.plan_epoch(job.index, epoch=0, batch_size=samples, rank=rank,
                                           world_size=world, drop_last=True)
    model = make_model(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    cuda = device.type == "cuda"
    loader = peer._make_loader(job)  # the bench's construction, sharded by RANK / WORLD_SIZE
    arrivals, counts, counters, rows, mismatched = [], [], [], [], []
    stopped = False
    try:
        batches_per_epoch = len(loader)
        dist.barrier()
        monitor = Monitor().start()
        begin = time.monotonic()
        it = iter(loader)
        try:
            for i in range(batches_per_epoch if args.record else per_rank):
                batch = next(it)
                frames = batch["frames"]
                if cuda:
                    torch.cuda.synchronize(device)
                arrivals.append(time.monotonic())
                counts.append(int(frames.shape[:-3].numel()))
                counters.append(dataclasses.asdict(loader.decode_stats))
                f = batch["frame_index"].cpu().numpy()
                f = f[..., 0] if job.plan.sampler.is_clip else f
                rows.append(np.stack([batch["video_index"].cpu().numpy().ravel(), f.ravel()], 1))
                try:
                    _check_same_batch(batch, own_plan.batch(i))
                except RuntimeError:
                    mismatched.append(i)
                if train_step(model, optimizer, frames,
                              _stop_flag(args, i, arrivals, warmup, min_timed), world,
                              sync=args.sync == "step"):
                    stopped = True
                    break
            else:  # the whole epoch (--record) must end here, on every rank
                if args.record and next(it, None) is not None:
                    mismatched.append("more batches than len(loader)")
        finally:
            monitor.stop()
            it.close()
    finally:
        loader.shutdown()
    if stopped and not args.batches and not args.record:
        # Past --seconds, this rank's batch (or another rank's) opened a new burst: the
        # window ends before it, on every rank alike.
        arrivals.pop(), counts.pop(), counters.pop()
    s, e = steady_window(arrivals, warmup)
    frames_n, seconds = sum(counts[s + 1 : e + 1]), arrivals[e] - arrivals[s]
    w0 = max(0, warmup - 1)
    plain_frames, plain_seconds = sum(counts[w0 + 1 :]), arrivals[-1] - arrivals[w0]
    out = {
        "rank": rank, "local_rank": local_rank, "device": str(device),
        "gpu_name": torch.cuda.get_device_name(device) if cuda else None,
        "batches_per_epoch": batches_per_epoch, "batches": len(rows),
        "batches_counted": len(arrivals), "warmup_batches": warmup,
        "timed_batches": len(arrivals) - warmup, "window_batches": e - s,
        "frames": frames_n, "seconds": seconds,
        "frames_per_s": frames_n / seconds if seconds > 0 else None,
        "plain_frames": plain_frames, "plain_seconds": plain_seconds,
        "plain_frames_per_s": plain_frames / plain_seconds if plain_seconds > 0 else None,
        "first_batch_s": arrivals[0] - begin,
        "end_to_end_frames_per_s": sum(counts) / (arrivals[-1] - begin),
        **_decode_counts(counters[s], counters[e]),
        "batches_not_as_planned": mismatched,
        "loader_prefetch": loader.config.prefetch, "loader_lookahead": loader.lookahead,
        "cores": sorted(os.sched_getaffinity(0)),
        "torch_peak_allocated_bytes": int(torch.cuda.max_memory_allocated(device)) if cuda else None,
        "maxrss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "arrivals_s": [round(t - begin, 4) for t in arrivals],
    }
    out.update({k: v for k, v in monitor.summary(arrivals[s], arrivals[e]).items()
                if not k.startswith(("gpu_", "nvdec_"))})
    out["_gpus"] = per_gpu(monitor.gpu, arrivals[s], arrivals[e])
    out["_rows"] = rows
    out["_context"] = {"workload": workload, "dataset": dataset.summary(), "job": job,
                       "warmup": warmup, "min_timed": min_timed, "timed": timed,
                       "per_rank": per_rank, "samples": samples}
    return out


def per_gpu(sampler, t0: float, t1: float) -> dict:
    """``nvidia-smi`` means over ``[t0, t1]`` of every GPU (by its index there; the script sets
    ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` so that index is the CUDA one), and its memory peak."""
    by_gpu: dict = {}
    for s in sampler.samples:
        by_gpu.setdefault(s[1], []).append(s)
    out = {}
    for gpu, rows in sorted(by_gpu.items()):
        window = [r for r in rows if t0 <= r[0] <= t1] or rows[-1:]
        before = [r for r in rows if r[0] < t0] or rows[:1]
        out[str(gpu)] = {
            "gpu_util_pct": sum(r[2] for r in window) / len(window),
            "nvdec_util_pct": sum(r[3] for r in window) / len(window),
            "mem_peak_bytes": int(max(r[4] for r in rows) * 2**20),
            "mem_baseline_bytes": int(min(r[4] for r in before) * 2**20),
        }
    return out


def check_union(results: list[dict], ctx: dict, shard: str, world: int, record: bool,
                lockstep: bool = True) -> dict:
    """The union of every rank's rows against the single-process epoch of the same sampler.
    ``lockstep=False`` (``--sync none``): ranks that stop on their own clock may end at
    different batch counts; equal counts are then not asked for (each rank's first
    ``min(counts)`` batches are compared, as always)."""
    import numpy as np

    job = ctx["job"]
    counts = [r["batches"] for r in results]
    k = min(counts)
    single = getattr(job.plan.sampler, "wrapped", job.plan.sampler)  # contiguous: the wrapped one
    whole = single.plan_epoch(job.index, epoch=0, batch_size=ctx["samples"], drop_last=True)
    epoch_batches = len(whole)
    # A timed window of the library's own shards covers no prefix of the single-process epoch
    # (since session 7 stream orders are sharded in contiguous blocks, the rest interleaved):
    # there every row received must be a row of that epoch, none more often than there (each
    # rank's rows are also compared with its own plan: ranks_as_planned).
    window = shard == "library" and not record
    if window:
        ids = list(range(epoch_batches))
    else:
        per_block = epoch_batches // world
        ids = [b for r in range(world) for b in global_batches(shard, r, world, per_block, k)]
    want = collections.Counter()
    for b in ids:
        bp = whole.batch(b)
        want.update(zip(bp.video_indices.tolist(), bp.frame_indices[:, 0].tolist()))
    got = collections.Counter()
    for r in results:
        for batch in r["_rows"][:k]:
            got.update(map(tuple, np.asarray(batch).tolist()))
    extra = got - want
    missing = collections.Counter() if window else want - got
    out = {
        "batch_counts": counts, "equal_batch_counts": len(set(counts)) == 1,
        "compared_batches_per_rank": k, "single_process_batches_covered": 0 if window else len(ids),
        "single_process_epoch_batches": epoch_batches,
        "whole_epoch": record and len(ids) == epoch_batches,
        "window_check": "rows within the epoch" if window else "prefix",
        "rows_received": sum(got.values()), "rows_expected": sum(want.values()),
        "distinct_rows_received": len(got),
        "epoch_repeats_rows": any(c > 1 for c in want.values()),
        "missing_rows": sum(missing.values()), "extra_rows": sum(extra.values()),
        "union_equals_epoch": not missing and not extra,
        "ranks_as_planned": all(not r["batches_not_as_planned"] for r in results),
    }
    out["exactly_once"] = bool(out["union_equals_epoch"]
                               and (out["equal_batch_counts"] or not lockstep)
                               and out["ranks_as_planned"]
                               and (out["epoch_repeats_rows"]
                                    or out["distinct_rows_received"] == out["rows_received"]))
    if record:
        out["ok"] = out["exactly_once"] and out["whole_epoch"]
    else:
        out["ok"] = out["exactly_once"]
    return out


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.summarize:
        return summarize(args.summarize, args.out)
    import torch.distributed as dist

    rank, world, local_rank, device = setup(args.backend)
    if args.cores:
        pin_cores(local_rank, args.cores)
    started = time.monotonic()
    try:
        result = run_rank(args, rank, world, local_rank, device)
    except BaseException as exc:
        # Another rank may wait in a collective: leave (torchrun then stops every rank), after
        # saying why in --out unless another rank already did.
        from vidloader.bench._workloads import Skip

        traceback.print_exc()
        if args.out and not os.path.exists(args.out):
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            Path(args.out).write_text(json.dumps({
                "workload": args.workload, "backend": args.backend, "world_size": world,
                "shard": args.shard, "record": args.record,
                "status": "skipped" if isinstance(exc, Skip) else "failed",
                "reasons": [f"rank {rank}: {type(exc).__name__}: {exc}"]}, indent=1) + "\n")
        raise
    context = result.pop("_context")  # rank 0's is the report's; not sent
    gathered = [None] * world
    dist.all_gather_object(gathered, result)
    ok = True
    if rank == 0:
        report = make_report(args, world, gathered, context, time.monotonic() - started)
        ok = report["check"]["ok"]
        print(f"{args.workload} x{world} ({args.backend}, {run_variant(report)}): "
              f"{report['total_frames_per_s']:,.0f} frames/s in all, per rank "
              + ", ".join(f"{r['frames_per_s'] or 0:,.0f}" for r in report["ranks"])
              + f"; batches per rank {report['check']['batch_counts']}; exactly once: "
              f"{report['check']['exactly_once']}, check ok: {ok}", flush=True)
        if args.out:
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            Path(args.out).write_text(json.dumps(report, indent=1, default=str) + "\n")
    dist.barrier()
    dist.destroy_process_group()
    return 0 if ok else 3


def make_report(args, world: int, results: list[dict], ctx: dict, wall_s: float) -> dict:
    from vidloader.bench._report import environment

    report = {
        "schema": "vidloader-multi-gpu/1",
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(["torchrun", f"--nproc_per_node={world}", *sys.argv]),
        "workload": args.workload, "backend": args.backend, "world_size": world,
        "shard": args.shard, "record": args.record, "workers_per_rank": args.num_workers,
        "scale": args.scale, "seed": args.seed, "seconds": args.seconds,
        "fixed_batches": args.batches, "sync": args.sync, "cores_per_rank": args.cores,
        "loader_options": loader_options(args.loader_option), "wall_s": wall_s,
        "environment": environment(args.note),
    }
    job = ctx["job"]
    report.update(
        status="ok", description=ctx["workload"].description, dataset=ctx["dataset"],
        batch_rows=job.plan.batch_size, samples_per_batch=ctx["samples"],
        cameras=ctx["workload"].cameras, index_repeats=job.plan.repeats,
        planned_batches_per_rank=ctx["per_rank"], min_timed_batches=ctx["min_timed"],
        sampler=job.plan.sampler.config(),
        model="Conv2d(3,8,3,s2)+ReLU+AvgPool+Linear(8,1) on frames[::s, ::s] (~112 px), SGD; "
              + ("one all-reduce of gradients and stop flag per step" if args.sync == "step"
                 else "no collective per step (--sync none: each rank alone)"),
    )
    report["check"] = check_union(results, ctx, args.shard, world, args.record,
                                  lockstep=args.sync == "step")
    report["gpu_names"] = [r["gpu_name"] for r in results]
    report["gpus"] = results[0]["_gpus"]  # nvidia-smi, sampled by rank 0, every GPU
    report["ranks"] = [{k: v for k, v in r.items() if not k.startswith("_")} for r in results]
    report["total_frames_per_s"] = sum(r["frames_per_s"] or 0 for r in results)
    longest = max(r["plain_seconds"] for r in results)
    report["total_plain_frames_per_s"] = (sum(r["plain_frames"] for r in results) / longest
                                          if longest > 0 else None)
    return report


# -- the table ----------------------------------------------------------------------------------


def summarize(directory: str, out: str | None) -> int:
    """The 1 GPU / 2 GPUs table of the JSON files under ``directory``; ``out``: all of them and
    the table in one JSON file."""
    runs = {}
    for path in sorted(Path(directory).glob("*.json")):
        try:
            runs[path.stem] = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            runs[path.stem] = {"status": "unreadable", "reasons": [str(exc)]}
    rows = []
    keyed = {}
    for name, r in runs.items():
        if r.get("record") or "workload" not in r:
            continue
        keyed[(r["workload"], run_variant(r), r.get("world_size"))] = r
    for (workload, variant, world), r in sorted(keyed.items()):
        if world == 1:
            continue
        shard = r.get("shard", "library")
        # the same variant on one GPU, else the library's default run of the workload
        one = keyed.get((workload, variant, 1)) or keyed.get((workload, "library", 1))
        fps1 = one.get("total_frames_per_s") if one and one.get("status") == "ok" else None
        fps2 = r.get("total_frames_per_s") if r.get("status") == "ok" else None
        ratio = fps2 / fps1 if fps1 and fps2 else None
        rows.append({
            "workload": workload, "shard": shard, "variant": variant, "world_size": world,
            "one_gpu_frames_per_s": fps1, "gpus_frames_per_s": fps2, "ratio": ratio,
            "meets_target": ratio is not None and ratio >= TARGET_RATIO,
            "decoded_per_delivered_1": _ddr(one), "decoded_per_delivered_n": _ddr(r),
            "exactly_once_prefix": r.get("check", {}).get("exactly_once"),
            "status": r.get("status"), "one_gpu_status": one.get("status") if one else None,
        })
    exact = {name: r.get("check", {}) | {"status": r.get("status")}
             for name, r in runs.items() if r.get("record")}
    print(f"{'workload':<28} {'1 GPU f/s':>10} {'N GPUs f/s':>11} {'ratio':>6}  "
          f"{'dec/deliv 1 -> N':<17} exact(prefix)")
    for row in rows:
        label = row["workload"] + ("" if row["variant"] == "library" else f" ({row['variant']})")
        ddr = f"{_fmt(row['decoded_per_delivered_1'], 2)} -> {_fmt(row['decoded_per_delivered_n'], 2)}"
        print(f"{label:<28} {_fmt(row['one_gpu_frames_per_s'], 0):>10} "
              f"{_fmt(row['gpus_frames_per_s'], 0):>11} {_fmt(row['ratio'], 2):>6}  {ddr:<17} "
              f"{row['exactly_once_prefix']}  x{row['world_size']}")
    for name, check in exact.items():
        print(f"exactly-once run {name}: ok={check.get('ok')} exactly_once="
              f"{check.get('exactly_once')} whole_epoch={check.get('whole_epoch')} batch counts "
              f"{check.get('batch_counts')} status={check.get('status')}")
    if out:
        Path(out).write_text(json.dumps({"target_ratio": TARGET_RATIO, "table": rows,
                                         "exactly_once_runs": exact, "runs": runs},
                                        indent=1, default=str) + "\n")
    return 0


def run_variant(report: dict) -> str:
    """What sets a run apart beyond its workload and ranks: its shards, ``--sync``,
    ``--cores`` and ``--loader-option`` s (``"library"`` for the defaults), so that variants
    in one folder do not replace each other in the table; also each run's printed line."""
    parts = [report.get("shard", "library")]
    if report.get("sync", "step") != "step":
        parts.append(f"sync {report['sync']}")
    if report.get("cores_per_rank"):
        parts.append(f"{report['cores_per_rank']} cores a rank")
    parts += [f"{k}={v}" for k, v in sorted((report.get("loader_options") or {}).items())]
    return ", ".join(parts)


def _ddr(report: dict | None):
    if not report or report.get("status") != "ok":
        return None
    values = [r.get("decoded_per_delivered") for r in report.get("ranks", [])]
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def _fmt(x, digits: int) -> str:
    return "-" if x is None else f"{x:,.{digits}f}"


if __name__ == "__main__":
    sys.exit(main())
