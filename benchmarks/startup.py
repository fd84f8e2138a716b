"""Start-up of a loader: seconds from ``VideoLoader(...)`` to its workers being ready and to
its first batch, for several loaders created one after the other in one fresh process (the
first pays the fork server's start, the others find it warm), as a training script that
builds loaders per epoch, or a notebook, does. Issue 14, item 2.

    PYTHONPATH=$PWD/src python benchmarks/startup.py --workers 2 --out start.json   # CPU
    PYTHONPATH=$PWD/src:$PWD/.site python benchmarks/startup.py --backend nvdec \\
        --workers 16 --scale gpu-quick --out $OUT/startup.json                    # GPU

Workload ``random`` of ``vidloader bench`` (RandomFrames, batch 128, 224x224) on dataset W1
(``--dataset demo``: the 32 480x270 videos of ``vidloader demo`` instead, the README's first
command; the steady state makes a batch of them in ~0.6 s on 2 cores, against ~2.3 s for W1's
960x540 frames, so the first batch shows the start-up more than the decoding).
The JSON holds every loader's ``constructed_s``, ``workers_ready_s`` and ``first_batch_s``,
the machine and its load average before and after. ``--profile`` samples every thread's stack
(``vidloader.bench._stacks``) in each phase (construct, start, first batch) and adds where
each thread group spent that phase to the JSON: what to cut to reach the issue's targets.
``--timeline`` records, up to each loader's first batch, when every unit was handed out,
demuxed, started and filled and every GOP decoded, on which thread
(``benchmarks/diag/startup_timeline.py``), with a summary. ``--cuda-first`` starts CUDA before
the first loader, as a training script that moved its model to the GPU has.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time


def _one_loader(index, args, timeline=None) -> dict:
    import torch

    import vidloader
    from vidloader.bench._stacks import StackSampler

    sampler = StackSampler(interval=args.profile_interval).start() if args.profile else None
    if timeline is not None:
        timeline.start()
    created = time.monotonic()
    if sampler:
        sampler.phase = "construct"
    loader = vidloader.VideoLoader(index, sampler=vidloader.RandomFrames(seed=0),
                                   batch_size=args.batch_size, size=(args.size, args.size),
                                   backend=args.backend, num_workers=args.workers,
                                   **({"nvdec_decoders": args.nvdec_decoders}
                                      if args.nvdec_decoders else {}))
    constructed = time.monotonic() - created
    try:
        if sampler:
            sampler.phase = "start"
        loader._start()  # the pool: workers started and Ready (iteration would do it)
        ready = time.monotonic() - created
        if sampler:
            sampler.phase = "first batch"
        # The iterator is kept until the time is taken: dropped at once (``next(iter(...))``),
        # its close would drain the units in flight inside the measurement (session10-7's
        # figures include that drain).
        batches = iter(loader)
        batch = next(batches)
        if batch["frames"].is_cuda:
            torch.cuda.synchronize()
        first = time.monotonic() - created
        events = timeline.stop() if timeline is not None else None
        if sampler:
            sampler.phase = "drain"
        del batches
    finally:
        if sampler:
            sampler.phase = "shutdown"
        loader.shutdown()
        if sampler:
            sampler.stop()
    out = {"constructed_s": round(constructed, 3), "workers_ready_s": round(ready, 3),
           "first_batch_s": round(first, 3)}
    if sampler:
        out["profile"] = sampler.summary(top=8)
    if timeline is not None:
        from startup_timeline import summarize

        out["timeline"] = summarize(events, first)
        out["timeline_events"] = events
    return out


def _decode_floor(index, args) -> dict:
    """What the first batch costs to decode, in this process, without a loader: batch 0's
    frames (the same sampler and seed as the loaders) decoded by one CPU executor, converted
    to the output size. GOPs shared by the batch's rows are decoded once, as no split of the
    batch over workers can beat; so ``floor_s`` (that time over the cores the workers can use)
    is the least a first batch can take, whatever the start-up."""
    import vidloader
    from vidloader.decoding.cpu._executor import CpuExecutor
    from vidloader.planning import plan_tasks

    plan = vidloader.RandomFrames(seed=0).plan_epoch(index, batch_size=args.batch_size, epoch=0)
    tasks = plan_tasks(plan.batch(0), index)
    executor = CpuExecutor()
    size = (args.size, args.size)
    start = time.monotonic()
    for task in tasks:
        executor.decode(task, lambda i, frame: frame.to_rgb(size))
    seconds = time.monotonic() - start
    executor.close()
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    cores = max(1, min(args.workers, usable))  # num_workers=0 decodes in the loader's process
    return {"batch0_decode_s": round(seconds, 3), "batch0_decoded_frames": executor.stats.decoded,
            "batch0_delivered_frames": executor.stats.delivered, "cores": cores,
            "floor_s": round(seconds / cores, 3)}


def _patch(item: str) -> None:
    """Set ``module.NAME`` to ``VALUE`` (a Python literal)."""
    import ast
    import importlib

    target, value = item.split("=", 1)
    module, name = target.rsplit(".", 1)
    mod = importlib.import_module(module)
    if not hasattr(mod, name):
        raise SystemExit(f"--patch {item}: {module} has no {name}")
    setattr(mod, name, ast.literal_eval(value))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", default="cpu", choices=["cpu", "nvdec", "combo"])
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--loaders", type=int, default=3, help="loaders created one after the other")
    p.add_argument("--dataset", default="W1", choices=["W1", "demo"],
                   help="W1 (the bench's) or demo (vidloader demo's 32 videos)")
    p.add_argument("--scale", default="small", help="dataset W1's scale (small, gpu-quick, ...)")
    p.add_argument("--data-dir", default=None, help="where the datasets are cached (bench's default)")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--nvdec-decoders", type=int, default=0,
                   help="NVDEC decoders (VideoLoader's nvdec_decoders; 0: its default)")
    p.add_argument("--out", default=None, help="JSON file")
    p.add_argument("--profile", action="store_true", help="sample stacks in each phase")
    p.add_argument("--profile-interval", type=float, default=0.01, help="seconds between samples")
    p.add_argument("--hang-dump", type=float, default=0.0,
                   help="after this many seconds, print every thread's stack and exit (0: off)")
    p.add_argument("--timeline", action="store_true",
                   help="record when each unit was handed out, demuxed, started and filled and "
                        "each GOP decoded, up to the first batch (benchmarks/diag/startup_timeline.py)")
    p.add_argument("--cuda-first", action="store_true",
                   help="start CUDA before the first loader, as a training script that moved its "
                        "model to the GPU has (its cost is then not the loader's)")
    p.add_argument("--prime-nvdec", action="store_true",
                   help="decode one frame on NVDEC (vidloader.decode_frames) before the first "
                        "loader: whether the first loader's extra wait is paid once per process")
    p.add_argument("--floor", action="store_true",
                   help="also decode the first batch in this process, without a loader (CPU), "
                        "and report the least time its decoding allows on --workers cores")
    p.add_argument("--patch", action="append", default=[], metavar="MODULE.NAME=VALUE",
                   help="set a module constant for this run (A/B of a change), e.g. "
                        "vidloader.pipeline._pool.PARTS_COUNT_AS_ROWS=False")
    args = p.parse_args(argv)
    for item in args.patch:
        _patch(item)
    if args.hang_dump > 0:  # a run that hangs says where (faulthandler's own thread)
        import faulthandler

        faulthandler.dump_traceback_later(args.hang_dump, exit=True)

    from vidloader._utils._sysinfo import describe_machine, load_average
    from vidloader.bench._datasets import load_index, prepare_dataset

    if args.dataset == "demo":
        import tempfile

        import vidloader
        from vidloader.synthetic import demo_specs, make_dataset

        root = os.path.join(args.data_dir or tempfile.gettempdir(), "vidloader-demo")
        index = vidloader.build_index(make_dataset(root, demo_specs(32, seed=0), progress=True),
                                      progress=False)
        dataset = f"demo ({len(index)} videos)"
    else:
        index = load_index(prepare_dataset("W1", args.scale, data_dir=args.data_dir, progress=True))
        dataset = f"W1-{args.scale} ({len(index)} videos)"
    cuda_s = None
    if args.cuda_first:
        import torch

        t = time.monotonic()
        torch.zeros(1, device="cuda")
        torch.cuda.synchronize()
        cuda_s = round(time.monotonic() - t, 3)
        print(f"CUDA started before the loaders in {cuda_s} s", flush=True)
    prime_s = None
    if args.prime_nvdec:
        import torch

        import vidloader

        t = time.monotonic()
        vidloader.decode_frames(index[0].path, [0], backend="nvdec", index_record=index[0])
        torch.cuda.synchronize()
        prime_s = round(time.monotonic() - t, 3)
        print(f"one NVDEC frame decoded before the loaders in {prime_s} s", flush=True)
    result = {"command": " ".join(sys.argv), "prime_nvdec_s": prime_s, "machine": describe_machine(),
              "dataset": dataset, "backend": args.backend,
              "workers": args.workers, "nvdec_decoders": args.nvdec_decoders or "default",
              "patches": args.patch, "cuda_first_s": cuda_s,
              "env": {k: v for k, v in os.environ.items() if k.startswith("VIDLOADER_")}, "load_avg_before": load_average(), "loaders": []}
    timeline = None
    if args.timeline:
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "diag"))
        from startup_timeline import Timeline

        timeline = Timeline()
        timeline.install()
    for k in range(args.loaders):
        result["loaders"].append(_one_loader(index, args, timeline))
        print(f"loader {k}: " + json.dumps({key: v for key, v in result["loaders"][-1].items()
                                            if key not in ("profile", "timeline_events")}), flush=True)
    if args.floor:
        result["decode_floor"] = _decode_floor(index, args)
        print("decode floor: " + json.dumps(result["decode_floor"]), flush=True)
    result["load_avg_after"] = load_average()
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
