"""``vidloader bench tradeoff``: throughput against statistical cost: GopShuffle at several
windows W, in its two in-block
orders (``uniform`` and ``balanced``), against SequentialFrames (the speed ceiling) and
RandomFrames (exact uniform sampling).

For every configuration it records the loader's frames/s (median of ``--repeats`` epochs),
the decoded frames per delivered frame, the design effect from the sampler's measured
cluster sizes and the intra-GOP correlation estimated on the decoded frames, and a
throughput predicted from the plans alone (no decoding): ``1 / (a + b * c)`` with ``c`` the
planner's decode cost per delivered frame and ``(a, b)`` fitted on the two anchors,
SequentialFrames and RandomFrames of the same series.

Series (all batch 64, 112x112 output, one epoch = 2,400 frames):

- ``loader-L4``: ``VideoLoader(num_workers=0)`` as it is: units of 4 consecutive batches;
- ``loader-Lpref``: the same with ``lookahead = plan.preferred_lookahead`` (~ one block);
- ``loader-uniform-L``: RandomFrames with lookahead 8, 16 and the whole epoch;
- ``units``: block-aligned decode units (``plan.decode_units()``; whole batches of 4 for the
  anchors) filled in this process by ``BatchAssembler.fill_unit``: the wiring the loader
  does not have yet (no shared memory or collation, so compare with its own anchors);
- ``loader-w2``: two spawned workers, preferred lookahead.

Usage, from the repository root::

    vidloader bench tradeoff [--repeats 3] [--quick] [--series S ...] [--orders O ...]
    vidloader bench tradeoff --stats-only   # statistics and plans, no timing
    vidloader bench tradeoff --plot-only

``--stats-only`` recomputes, for every configuration, what needs no decoding (cluster sizes,
design effects, planned decode cost, predicted throughput) and keeps the timings and
correlations already in ``--json`` (a configuration never timed has ``fps_median`` null).
``--series`` / ``--orders`` time only those series / GopShuffle orders (with the anchors)
and replace their rows in an existing ``--json``.

Writes ``benchmarks/results/cpu/sampling_tradeoff.json`` and ``docs/sampling_tradeoff.png``
(the figure: :mod:`._tradeoff_plot`).
"""

from __future__ import annotations

import json
import os
import statistics
import time
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from ..analysis import estimate_intra_gop_correlation, sampling_report
from ..errors import ConfigError
from ..index import build_index
from ..pipeline import VideoLoader
from ..sampling import GopShuffle, RandomFrames, SequentialFrames
from ..synthetic import VideoSpec, make_dataset
from ._tradeoff_plot import ORDERS, plot

BATCH, SIZE = 64, (112, 112)
WINDOWS = (1, 2, 4, 8, 16, 32, 64)


def make_index(media: Path):
    specs = [
        VideoSpec(width=320, height=240, num_frames=150, gop=30, bframes=2, seed=i)
        for i in range(16)
    ]
    paths = make_dataset(media, specs, num_workers=2)
    return build_index(paths, num_workers=0, progress=False)


def correlations(index) -> dict:
    out = {}
    for level in ("gop", "video", "random"):
        for feature in ("pixels", "mean_rgb"):
            est = estimate_intra_gop_correlation(
                index, num_pairs=256, size=(64, 64), feature=feature, level=level, seed=0
            )
            out[f"{level}/{feature}"] = {
                "rho": est.rho, "stderr": est.stderr, "ci95": list(est.ci95), "pairs": est.num_pairs,
            }
            print(" ", est, flush=True)
    return out


# -- configurations ----------------------------------------------------------------------------

#: series -> (worker processes, how batches are grouped into decode units)
SERIES = {
    "loader-L4": (0, "lookahead"),        # the loader as it is, default lookahead of 4 batches
    "loader-Lpref": (0, "lookahead"),     # lookahead = plan.preferred_lookahead (~ one block)
    "loader-uniform-L": (0, "lookahead"),  # exact uniform with a long lookahead
    "units": (0, "units"),                # block-aligned decode units (prototype of the wiring)
    "loader-w2": (2, "lookahead"),        # two spawned workers, preferred lookahead
}


def configurations(quick: bool, orders: tuple[str, ...] = ORDERS) -> list[dict]:
    """Anchors, then GopShuffle at each window in each order (``None``: the default window,
    balanced order only; the uniform order's default is ``W = B = 64``)."""
    windows = (2, 8, 64) if quick else WINDOWS

    def gop(w, series, lookahead, order):
        return {"name": f"GopShuffle(W={'default' if w is None else w}, {order})", "window": w,
                "order": order, "series": series, "lookahead": lookahead,
                "sampler": GopShuffle(window_gops=w, order=order, seed=0)}

    def anchor(sampler, series, lookahead=4):
        return {"name": type(sampler).__name__, "series": series, "sampler": sampler,
                "lookahead": lookahead}

    configs = []
    for series in ("loader-L4", "units", "loader-w2"):
        configs += [anchor(SequentialFrames(), series), anchor(RandomFrames(seed=0), series)]
    configs += [anchor(RandomFrames(seed=0), "loader-uniform-L", L) for L in (8, 16, "epoch")]
    for order in orders:
        for w in (*windows, None) if order == "balanced" else windows:
            configs += [gop(w, "loader-L4", 4, order), gop(w, "units", None, order)]
            if w is None or w >= 16:  # below, the preferred lookahead is the default 4
                configs.append(gop(w, "loader-Lpref", "pref", order))
        configs += [gop(w, "loader-w2", "pref", order) for w in ((8,) if quick else (4, 16, 64))]
    return configs


def resolve_lookahead(config: dict, index) -> int:
    plan = config["sampler"].plan_epoch(index, epoch=0, batch_size=BATCH)
    if config["lookahead"] == "epoch":
        return len(plan)
    if config["lookahead"] == "pref":
        return plan.preferred_lookahead
    return int(config["lookahead"] or 4)


def decode_units(plan, lookahead: int | None) -> Iterable[list[tuple[int, int, int]]]:
    """``[(batch, row_start, row_stop), ...]`` per unit: the plan's block-aligned units if it
    has them, else ``lookahead`` consecutive whole batches."""
    if hasattr(plan, "decode_units"):
        return plan.decode_units()
    return [[(b, 0, plan.batch(b).batch_size) for b in range(u, min(u + lookahead, len(plan)))]
            for u in range(0, len(plan), lookahead)]


# -- measurements ------------------------------------------------------------------------------

def time_loader(index, sampler, *, workers: int, lookahead: int) -> dict:
    """Frames/s of one epoch through VideoLoader; workers are started before the clock."""
    loader = VideoLoader(index, sampler=sampler, batch_size=BATCH, size=SIZE, num_workers=workers,
                         lookahead=lookahead, persistent_workers=True)
    try:
        for _ in loader:  # start the workers (and warm the page cache) on one batch
            break
        loader.set_epoch(0)
        before = dict(vars(loader.decode_stats))
        start, frames = time.perf_counter(), 0
        for batch in loader:
            frames += batch["frames"].shape[0]
        fps = frames / (time.perf_counter() - start)
        stats = {k: v - before[k] for k, v in vars(loader.decode_stats).items()}
    finally:
        loader.shutdown()
    return {"fps": fps, "decode": stats}


def time_units(index, sampler, *, lookahead: int) -> dict:
    """Frames/s of one epoch when each unit's rows are planned and decoded together, in this
    process (no loader: no shared memory, no collation; the anchors run through the same code)."""
    from ..decoding import get_executor
    from ..pipeline._assemble import BatchAssembler
    from ..processing import as_outputs
    from ..sampling._gop_epoch import slice_plan

    with get_executor("cpu") as executor:
        assembler = BatchAssembler(index, as_outputs(None, size=SIZE), executor)
        plan = sampler.plan_epoch(index, epoch=0, batch_size=BATCH)
        start, frames, staging = time.perf_counter(), 0, {}
        for unit in decode_units(plan, lookahead):
            parts, views = [], []
            for b, row_start, row_stop in unit:
                slot = staging.setdefault(b, np.empty((BATCH, 1, *SIZE, 3), np.uint8))
                parts.append(slice_plan(plan.batch(b), row_start, row_stop))
                views.append({"frames": slot[row_start:row_stop]})
                frames += row_stop - row_start
            assembler.fill_unit(parts, views)
            for b, _, _ in unit[:-1]:  # only a unit's last batch may go on in the next unit
                staging.pop(b, None)
        fps = frames / (time.perf_counter() - start)
        return {"fps": fps, "decode": dict(vars(executor.stats))}


def planned_cost(index, sampler, *, lookahead: int, aligned: bool) -> tuple[float, int]:
    """From the plans alone: frames a decoder passes through per delivered frame (no frame
    skipping, no decoder kept between units), and the most samples one unit holds."""
    from ..planning import estimated_decode_cost, plan_tasks
    from ..sampling._gop_epoch import slice_plan

    plan = sampler.plan_epoch(index, epoch=0, batch_size=BATCH)
    units = decode_units(plan, lookahead) if aligned else decode_units(_Whole(plan), lookahead)
    passed = delivered = largest = 0
    for unit in units:
        parts = [slice_plan(plan.batch(b), s, e) for b, s, e in unit]
        passed += sum(estimated_decode_cost(t) for t in plan_tasks(parts, index))
        size = sum(p.batch_size for p in parts)
        delivered, largest = delivered + size, max(largest, size)
    return passed / delivered, largest


class _Whole:
    """A plan seen as whole batches only (hides ``decode_units``)."""

    def __init__(self, plan) -> None:
        self.batch, self._n = plan.batch, len(plan)

    def __len__(self) -> int:
        return self._n


def predict(results: list[dict]) -> None:
    """Fit ``seconds per frame = a + b * cost`` on the SequentialFrames and RandomFrames
    anchors of a harness (in-process loader, units, two workers); predict every other row."""
    harness = {"loader-L4": "loader-L4", "loader-Lpref": "loader-L4",
               "loader-uniform-L": "loader-L4", "units": "units", "loader-w2": "loader-w2"}
    for series, anchor_series in harness.items():
        anchors = {r["name"]: r for r in results if r["series"] == anchor_series
                   and r["name"] in ("SequentialFrames", "RandomFrames")}
        if len(anchors) < 2:
            continue
        seq, rnd = anchors["SequentialFrames"], anchors["RandomFrames"]
        x0, y0 = seq["planned_cost"], 1 / seq["fps_median"]
        b = (1 / rnd["fps_median"] - y0) / (rnd["planned_cost"] - x0)
        a = y0 - b * x0
        for r in results:
            if r["series"] == series:
                r["fps_predicted"] = 1 / (a + b * r["planned_cost"])
                r["model"] = {"a_s_per_frame": a, "b_s_per_planned_frame": b}


def describe(config: dict, index, rho: dict) -> dict:
    """Everything about a configuration that needs no decoding: statistics and planned cost."""
    sampler, series = config["sampler"], config["series"]
    workers, grouping = SERIES[series]
    lookahead = resolve_lookahead(config, index)
    report = sampling_report(sampler, index, batch_size=BATCH, epochs=5, rho=rho["gop"],
                             rho_video=rho["video"])
    cost, unit_samples = planned_cost(index, sampler, lookahead=lookahead, aligned=grouping == "units")
    window = order = None
    if isinstance(sampler, GopShuffle):
        plan = sampler.plan_epoch(index, epoch=0, batch_size=BATCH)
        window, order = plan.window, plan.order  # the default window resolved
        if grouping == "units":
            lookahead = None  # one unit per block: no lookahead in batches
    return {
        "name": config["name"], "window": window, "order": order, "series": series,
        "workers": workers, "lookahead": lookahead, "unit_samples_max": unit_samples,
        "fps": [], "fps_median": None, "planned_cost": cost,
        "mbar_gop": report.mbar_gop, "mbar_gop_analytic": report.mbar_gop_analytic,
        "mbar_video": report.mbar_video, "mbar_video_analytic": report.mbar_video_analytic,
        "deff": report.deff, "effective_batch": report.effective_batch_size,
        "position_bias": report.position_bias, "inclusion_tv": report.inclusion_tv,
    }


def measure(config: dict, row: dict, index) -> dict:
    """One timed epoch of the configuration."""
    workers, grouping = SERIES[row["series"]]
    if grouping == "units":
        return time_units(index, config["sampler"], lookahead=row["lookahead"])
    return time_loader(index, config["sampler"], workers=workers, lookahead=row["lookahead"])


def finish(row: dict) -> None:
    decode = row.pop("decode")
    row["fps_median"] = statistics.median(row["fps"])
    row["decoded_per_delivered"] = decode["decoded"] / decode["delivered"]
    row["seeks_per_1000_frames"] = 1000 * decode["seeks"] / decode["delivered"]
    print(f"{row['series']:16s} {row['name']:18s} L={row['lookahead']!s:>4} "
          f"unit<={row['unit_samples_max']:>5} {row['fps_median']:6.0f} fps  decoded/frame "
          f"{row['decoded_per_delivered']:.2f}  planned {row['planned_cost']:.2f}  deff "
          f"{row['deff']:.2f}  runs {[round(f) for f in row['fps']]}", flush=True)


def _key(row: dict) -> tuple:
    return row["series"], row["name"], row["lookahead"]


def _migrate(rows: list[dict]) -> list[dict]:
    """Rows written before GopShuffle had two orders: theirs was the uniform one."""
    for r in rows:
        if r["name"].startswith("GopShuffle(") and "order" not in r:
            r["name"], r["order"] = f"GopShuffle(W={r['window']}, uniform)", "uniform"
        r.setdefault("order", None)
    return rows


def _merge(saved: list[dict], new: list[dict]) -> list[dict]:
    """``saved`` with the rows of ``new`` in place of those with the same key; the other new
    rows appended."""
    fresh = {_key(r): r for r in new}
    out = [fresh.pop(_key(r), r) for r in saved]
    return out + [r for r in new if _key(r) in fresh]


#: What a timed run adds to a row (kept by ``--stats-only``).
TIMED_FIELDS = ("fps", "fps_median", "load_1min", "decoded_per_delivered", "seeks_per_1000_frames")


def run(args) -> int:
    """Time, describe and plot (options: ``vidloader bench tradeoff --help``).

    Raises:
        ConfigError: an unknown ``--series``, or ``--stats-only`` without an earlier ``--json``.
    """
    unknown = sorted(set(args.series or ()) - set(SERIES))
    if unknown:
        raise ConfigError(f"--series: unknown {', '.join(unknown)}; choose from "
                          f"{', '.join(sorted(SERIES))}")
    json_path, plot_path = Path(args.json), Path(args.plot)
    repeats = 1 if args.quick else args.repeats
    saved = json.loads(json_path.read_text()) if json_path.exists() else None
    if saved is not None:
        _migrate(saved["results"])
    if args.plot_only:
        plot(saved["results"], saved["rho_used"], plot_path)
        return 0
    if args.stats_only and saved is None:
        raise ConfigError(f"--stats-only needs an earlier --json (its correlations and "
                          f"timings); {json_path} does not exist")

    from .._utils._sysinfo import describe_machine

    load_before = os.getloadavg()
    index = make_index(Path(args.media))
    print(index, flush=True)
    if args.stats_only:
        rho_table, rho = saved["correlations"], saved["rho_used"]
    else:
        print("intra-class correlations (256 pairs, 64x64):", flush=True)
        rho_table = correlations(index)
        # A negative between-GOP correlation (periodic synthetic motion) would credit
        # clustering with a variance *reduction*; count it as 0, the conservative choice.
        rho = {"gop": max(0.0, rho_table["gop/pixels"]["rho"]),
               "video": max(0.0, rho_table["video/pixels"]["rho"])}
    configs = [c for c in configurations(args.quick, tuple(args.orders))
               if not args.series or c["series"] in args.series]
    results = [describe(config, index, rho) for config in configs]
    if args.stats_only:
        timed = {_key(r): r for r in saved["results"]}
        for row in results:
            old = timed.get(_key(row), {})
            row.update({k: old[k] for k in TIMED_FIELDS if k in old})
        repeats = 0
    # Repeats go round all configurations, so a burst of load from other users of the
    # machine hits every configuration alike instead of all repeats of one.
    for repeat in range(repeats):
        print(f"repeat {repeat + 1} of {repeats} over {len(configs)} configurations", flush=True)
        for config, row in zip(configs, results):
            timing = measure(config, row, index)
            row["fps"].append(timing["fps"])
            row.setdefault("load_1min", []).append(round(os.getloadavg()[0], 2))
            row["decode"] = timing["decode"]
            if repeat == repeats - 1:
                finish(row)
    this_run = {"series": sorted({r["series"] for r in results}), "orders": args.orders,
                "repeats": repeats, "stats_only": args.stats_only,
                "load_average_before": load_before, "load_average_after": os.getloadavg(),
                "finished": time.strftime("%Y-%m-%d %H:%M:%S")}
    runs = [this_run]
    if saved is not None and (args.stats_only or args.series or set(args.orders) != set(ORDERS)):
        results = _merge(saved["results"], results)  # keep the rest of the earlier runs
        runs = saved.get("runs", []) + runs
    predict(results)
    out = {
        "machine": saved["machine"] if args.stats_only else describe_machine(), "runs": runs,
        "dataset": {"videos": len(index), "frames": index.total_frames, "size": "320x240",
                    "gop": 30, "bframes": 2, "codec": "h264"},
        "batch_size": BATCH, "output_size": list(SIZE),
        "correlations": rho_table, "rho_used": rho, "results": results,
    }
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(out, indent=1, default=float))
    plot(results, rho, plot_path)
    print(f"wrote {json_path} and {plot_path}")
    return 0
