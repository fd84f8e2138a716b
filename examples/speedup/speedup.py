"""Seed 000's speed-up demo: the same random frames from the same files, step by step from a
naive loader to vidloader on CPU, relaxed (GOP-local) sampling, NVDEC and CPU + NVDEC::

    python examples/speedup/speedup.py                 # CPU steps; GPU steps say they are skipped
    python examples/speedup/speedup.py --tiny          # CI
"""

from __future__ import annotations

import argparse
import importlib.util
import time
from pathlib import Path

import av
import numpy as np
import torch

import vidloader
from vidloader.synthetic import VideoSpec, make_dataset


def naive_batches(index, sampler, batch_size: int, size: int, batches: int):
    """What a first loader does: per frame, open the file, seek, decode forward, resize."""
    plan = sampler.plan_epoch(index, epoch=0, batch_size=batch_size)
    for b in range(min(batches, len(plan))):
        bp = plan.batch(b)
        frames = [_naive_frame(index[int(v)], int(f[0]), size)
                  for v, f in zip(bp.video_indices, bp.frame_indices)]
        yield {"frames": torch.from_numpy(np.stack(frames))}


def _naive_frame(record, frame: int, size: int) -> np.ndarray:
    with av.open(record.path) as c:
        stream = c.streams.video[0]
        target = int(record.pts[frame])
        c.seek(target, stream=stream, backward=True)
        for decoded in c.decode(stream):
            if decoded.pts == target:
                return decoded.to_ndarray(width=size, height=size, format="rgb24")
    raise RuntimeError(f"{record.path}: frame {frame} (pts {target}) not found")


def gpu_ready() -> str | None:
    """Why the NVDEC steps cannot run here, or None when they can."""
    if not torch.cuda.is_available():
        return "no CUDA GPU"
    if importlib.util.find_spec("PyNvVideoCodec") is None:
        return "PyNvVideoCodec is not installed (pip install 'vidloader[nvdec]')"
    return None


def timed(batches) -> tuple[float, int]:
    """frames/s after a first, untimed batch (worker start-up is not decoding speed)."""
    next(batches)
    start, frames = time.perf_counter(), 0
    for batch in batches:
        frames += len(batch["frames"])
    torch.cuda.synchronize() if torch.cuda.is_available() else None
    return frames / (time.perf_counter() - start), frames


def main(argv=None) -> dict[str, float | None]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default="/tmp/vidloader-example-speedup")
    p.add_argument("--batches", type=int, default=8)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--tiny", action="store_true", help="2 small videos, 2 batches (CI)")
    args = p.parse_args(argv)
    n, width, height, frames = (2, 96, 64, 40) if args.tiny else (8, 480, 270, 300)
    batches = 2 if args.tiny else args.batches
    args.workers = 0 if args.tiny else args.workers  # CI: no worker start-up
    specs = [VideoSpec(width=width, height=height, num_frames=frames, gop=30, seed=i)
             for i in range(n)]
    files = make_dataset(Path(args.data) / f"{width}x{height}", specs, num_workers=1)
    index = vidloader.build_index(files, num_workers=0, progress=False)
    size, bs = 112, (8 if args.tiny else args.batch_size)

    def loader(sampler, **kw):
        kw.setdefault("num_workers", args.workers)
        it = vidloader.VideoLoader(index, sampler=sampler, batch_size=bs, size=(size, size), **kw)
        return (batch for _, batch in zip(range(batches + 1), it))

    steps = {
        "naive (open, seek, decode per frame)":
            lambda: naive_batches(index, vidloader.RandomFrames(seed=0), bs, size, batches + 1),
        "vidloader cpu (exact random)": lambda: loader(vidloader.RandomFrames(seed=0)),
        "vidloader cpu, relaxed (GopShuffle)": lambda: loader(vidloader.GopShuffle(seed=0)),
        "vidloader nvdec": lambda: loader(vidloader.RandomFrames(seed=0), backend="nvdec"),
        "vidloader combo (cpu + nvdec)": lambda: loader(vidloader.RandomFrames(seed=0),
                                                        backend="combo"),
    }
    results: dict[str, float | None] = {}
    base = None
    for name, make in steps.items():
        why = gpu_ready() if "nvdec" in name else None
        if why:
            print(f"{name:38s} skipped: {why}")
            results[name] = None
            continue
        rate, count = timed(make())
        base = base or rate
        results[name] = rate
        print(f"{name:38s} {rate:8.1f} frames/s  ×{rate / base:5.1f}  ({count} frames)", flush=True)
    return results


if __name__ == "__main__":
    main()
