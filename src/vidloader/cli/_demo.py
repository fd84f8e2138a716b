"""``vidloader demo [PATH]``: uniform random frames at batch 128, 224×224, with throughput.

Without a path it first generates a small labelled synthetic dataset (H.264 with motion,
B-frames and a realistic bitrate). It prints frames/s with the machine's CPU, memory and GPU,
as question 1 of the dataloader exercise asks.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from .._utils._sysinfo import describe_machine, format_machine
from ..bench._monitor import Monitor
from ..index import build_index
from ..sampling import RandomFrames
from ..synthetic import demo_specs, make_dataset

if TYPE_CHECKING:
    from ..pipeline import VideoLoader


def register_demo(sub) -> None:
    p = sub.add_parser("demo", help="measure uniform-random frame loading (synthetic data by default)")
    p.add_argument("path", nargs="?", help="videos to use (default: generate a synthetic dataset)")
    p.add_argument("--batches", type=int, default=200, help="batches to load (default 200)")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--size", type=int, default=224, help="output height and width (default 224)")
    p.add_argument("--workers", type=int, default=None, help="decoding processes (default: cores)")
    p.add_argument("--videos", type=int, default=32, help="synthetic videos to generate")
    p.add_argument("--data-dir", default=None, help="where to put the synthetic videos")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--backend", choices=["cpu", "nvdec", "combo"], default="cpu",
                   help="cpu (PyAV workers), nvdec (GPU decoding) or combo (both at once; "
                        "prints each executor's share)")
    p.add_argument("--images", action="store_true",
                   help="images instead: a generated CIFAR-10-format set and a JPEG folder")
    p.set_defaults(func=run_demo)


def _dataset(args) -> tuple[list[Path], list[int] | None]:
    if args.path:
        return [Path(args.path)], None
    root = Path(args.data_dir or os.path.join(tempfile.gettempdir(), "vidloader-demo"))
    specs = demo_specs(args.videos, seed=args.seed)
    paths = make_dataset(root, specs, progress=True)
    # Ten classes: the label of a synthetic video is its pattern's seed modulo 10.
    return paths, [spec.seed % 10 for spec in specs]


def run_demo(args) -> int:
    if args.images:
        from ._demo_images import run_image_demo

        return run_image_demo(args)
    from ..pipeline import VideoLoader  # imports torch: only when the demo runs

    paths, labels = _dataset(args)
    index = build_index(paths, progress=True)
    print(f"indexed {len(index)} videos, {index.total_frames} frames"
          + (f" ({len(index.rejected)} rejected)" if index.rejected else ""))
    loader = VideoLoader(
        index, sampler=RandomFrames(seed=args.seed), batch_size=args.batch_size,
        size=(args.size, args.size), labels=labels, num_workers=args.workers,
        persistent_workers=True, backend=args.backend,
    )
    # This process and its workers, and the whole machine: CPU shares once a second and no
    # memory (reading it every 200 ms cost the demo a fifth of its throughput on 2 cores).
    monitor = Monitor(memory_seconds=None, interval=1.0).start()
    try:
        frames, seconds, first, window = _measure(loader, args.batches)
    finally:
        monitor.stop()  # first: its last sample must still see the workers
        loader.shutdown()
    _report(loader, frames, seconds, first, args, _load_line(monitor.summary(*window), monitor.load))
    return 0


def _measure(loader: VideoLoader, batches: int) -> tuple[int, float, float, tuple[float, float]]:
    """Frames and seconds after the first batch (start-up excluded), the first batch's time,
    and the timed window in ``time.monotonic()`` (for the monitor)."""
    from tqdm.auto import tqdm

    bar = tqdm(total=batches, desc="loading", unit="batch")
    frames, start, t0, first = 0, time.monotonic(), None, 0.0
    while bar.n < batches:
        for batch in loader:
            if t0 is None:
                t0, first = time.monotonic(), time.monotonic() - start
            else:
                frames += batch["frames"].shape[0]
            bar.update()
            if bar.n >= batches:
                break
    bar.close()
    end = time.monotonic()
    return frames, end - (t0 or start), first, (t0 or start, end)


#: What this demo gives on an idle machine (README, "vidloader demo"): frames/s and the machine.
IDLE_REFERENCE = (200, "an idle 2-core AMD EPYC (the CI machine)")


def _load_line(figures: dict, load: list) -> str:
    """The machine's load while the demo ran, and what to expect without it."""
    load_1m = load[-1][0] if load and load[-1] else None
    other = figures.get("other_cpu_pct")
    parts = [f"load average (1 min) {load_1m:.2f} on {os.cpu_count()} cores" if load_1m is not None
             else "load average unknown"]
    if other is not None:
        parts.append(f"other processes used {other:.0f}% of the CPU meanwhile "
                     f"(this demo {figures['cpu_util_pct']:.0f}%)")
    fps, machine = IDLE_REFERENCE
    return ("machine load: " + "; ".join(parts) + f".\nOn {machine} this demo gives about "
            f"{fps} frames/s; other processes' CPU share lowers it about in proportion.")


def _report_split(loader: VideoLoader) -> None:
    """Which executor filled how many rows, and the files NVDEC handed to the CPU."""
    stats = loader.stats
    rows = stats["rows_by_executor"]
    total = sum(rows.values()) or 1
    print("rows by executor: " + ", ".join(f"{k} {v} ({100 * v / total:.0f}%)" for k, v in sorted(rows.items())))
    if loader.nvdec_refusals:
        print(f"{len(loader.nvdec_refusals)} files decoded on the CPU (NVDEC cannot): "
              + next(iter(loader.nvdec_refusals.values())))
    if stats["cpu_fallback_files"]:
        print(f"{len(stats['cpu_fallback_files'])} files retried on the CPU after NVDEC failed")


def _report(loader: VideoLoader, frames: int, seconds: float, first: float, args, load: str) -> None:
    ds = loader.decode_stats
    print(f"\nuniform random frames, batch {args.batch_size}, {args.size}x{args.size}, "
          f"{loader.num_workers} workers, backend {loader.backend}")
    print(f"throughput: {frames / seconds:,.0f} frames/s ({frames} frames in {seconds:.1f} s; "
          f"start-up and first batch {first:.1f} s)")
    print(load)
    print(f"decoded frames per delivered frame: {ds.decoded_per_delivered:.2f} "
          f"({ds.skipped} non-reference frames skipped, {ds.seeks} seeks)")
    if loader.backend != "cpu":
        _report_split(loader)
    print(format_machine(describe_machine()))
