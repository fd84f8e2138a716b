"""``vidloader bench gop-cost``: what ``vidloader prepare --gop N`` buys and costs.

One synthetic source dataset (long GOPs with B-frames, as cameras and web videos have) is
re-encoded by :func:`vidloader.prepare.prepare_dataset` at each GOP (the same encoder
settings for all, so only the keyframe interval differs). For each we measure the bytes on
disk and uniformly random frames/s (``RandomFrames``, the same seed, batch and size), with
the frames decoded per frame delivered, and report both against the longest GOP.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from ..index import build_index
from ..prepare import prepare_dataset
from ..synthetic import VideoSpec, make_dataset
from ._report import environment


def measure_random_access(directory: Path, args) -> dict:
    """Random frames/s over ``args.batches`` batches, decoded in this process (no worker
    start-up in the timing: on one core the ratio between GOPs is the decoding cost alone)."""
    from ..pipeline import VideoLoader
    from ..sampling import RandomFrames

    index = build_index(directory, num_workers=0, progress=False)
    loader = VideoLoader(index, sampler=RandomFrames(seed=args.seed), batch_size=args.batch_size,
                         size=(args.size, args.size), num_workers=0, lookahead=1)
    start, frames = time.perf_counter(), 0
    for _, batch in zip(range(args.batches), loader):
        frames += len(batch["frames"])
    seconds = time.perf_counter() - start
    stats = loader.decode_stats
    loader.shutdown()
    return {"frames_per_s": frames / seconds, "frames": frames, "seconds": seconds,
            "decoded_per_delivered": stats.decoded / max(1, stats.delivered),
            "disk_bytes": sum(r.size_bytes for r in index), "total_frames": index.total_frames}


def run(args) -> int:
    work = Path(args.data_dir)
    gops = [int(g) for g in args.gops.split(",")]
    specs = [VideoSpec(width=args.width, height=args.height, num_frames=args.frames,
                       gop=max(gops), bframes=2, seed=i) for i in range(args.videos)]
    source = work / "source"
    make_dataset(source, specs, num_workers=args.workers or 1, progress=True)
    rows = []
    for gop in gops:
        out = work / f"gop{gop}"
        prepared = prepare_dataset(source, out, gop=gop, num_workers=args.workers,
                                   progress=True)
        row = {"gop": gop, "prepare_failed": prepared.count("failed"),
               **measure_random_access(out, args)}
        rows.append(row)
        print(f"GOP {gop:>4}: {row['disk_bytes'] / 1e6:7.2f} MB  "
              f"{row['frames_per_s']:8.1f} random frames/s  "
              f"{row['decoded_per_delivered']:5.2f} decoded per delivered", flush=True)
    base = rows[0]
    for row in rows:
        row["speedup_vs_first"] = row["frames_per_s"] / base["frames_per_s"]
        row["disk_vs_first"] = row["disk_bytes"] / base["disk_bytes"]
    report = {"benchmark": "gop-cost", "settings": {k: v for k, v in vars(args).items()
                                                    if k != "func"},
              "environment": environment(args.note), "rows": rows}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=1))
    print(markdown_table(rows))
    print(f"written to {args.out}")
    return 0


def markdown_table(rows: list[dict]) -> str:
    lines = ["| GOP | disk (MB) | disk vs first | random frames/s | speed-up | decoded per delivered |",
             "|---:|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['gop']} | {r['disk_bytes'] / 1e6:.2f} | ×{r['disk_vs_first']:.2f} | "
              f"{r['frames_per_s']:.1f} | ×{r['speedup_vs_first']:.2f} | "
              f"{r['decoded_per_delivered']:.2f} |" for r in rows]
    return "\n".join(lines)
