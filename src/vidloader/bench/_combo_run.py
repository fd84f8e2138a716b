"""The combo against its parts, in one process run: CPU alone, NVDEC alone, both at once.

For each workload (W1 uniform random frames at 224², W4 Kinetics-like 16-frame clips with
stride 2 and a 112² crop) it runs ``VideoLoader`` with ``backend="cpu"``, ``"nvdec"`` and
``"combo"`` (and the static ``combo_share`` split) on the same dataset, each for a warm-up
then a timed window, and writes one JSON: frames/s of each, each executor's share of the
combo's rows, and ``combo / (cpu + nvdec)``. Runs on the GPU machine::

    python -m vidloader.bench._combo_run --scale gpu-quick --workers 16 --out combo.json
"""

from __future__ import annotations

import argparse
import json
import time


def _measure(loader, warmup: int, batches: int) -> dict:
    import torch

    t_created = time.perf_counter()
    it = iter(loader)
    first = None
    for _ in range(warmup):
        b = next(it)
        first = first or time.perf_counter() - t_created
    torch.cuda.synchronize()
    t0, frames = time.perf_counter(), 0
    for _ in range(batches):
        b = next(it)
        f = b["frames"]
        frames += f.shape[0] * (f.shape[1] if f.dim() == 5 else 1)
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    it.close()
    stats = dict(loader.stats)
    loader.shutdown()
    return {"frames_per_s": frames / dt, "seconds": dt, "frames": frames, "first_batch_s": first,
            "rows_by_executor": stats["rows_by_executor"],
            "cpu_fallback_files": len(stats["cpu_fallback_files"])}


def _workloads(scale: str):
    from vidloader import Clips, Process, RandomFrames

    return {
        "W1-random": ("W1", dict(sampler=RandomFrames(seed=0), batch_size=128, size=(224, 224))),
        "W4-clips": ("W4", dict(sampler=Clips(sequence_length=16, stride=2, seed=0), batch_size=8,
                               processing=Process(size=(112, 112), short_side=128, crop="random"))),
    }


def main(argv=None) -> None:
    from vidloader import VideoLoader
    from vidloader.bench._datasets import load_index, prepare_dataset

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", default="gpu-quick")
    ap.add_argument("--workers", type=int, default=16)
    ap.add_argument("--warmup", type=int, default=8)
    ap.add_argument("--batches", type=int, default=40)
    ap.add_argument("--data-dir", default="/tmp/bench-data")
    ap.add_argument("--workloads", default="W1-random,W4-clips")
    ap.add_argument("--out", default="combo.json")
    args = ap.parse_args(argv)
    results = {}
    for name in args.workloads.split(","):
        dataset, kwargs = _workloads(args.scale)[name]
        index = load_index(prepare_dataset(dataset, args.scale, data_dir=args.data_dir))
        row = {}
        for label, extra in (("cpu", dict(backend="cpu")), ("nvdec", dict(backend="nvdec")),
                             ("combo", dict(backend="combo")),
                             ("combo-share-0.5", dict(backend="combo", combo_share=0.5))):
            loader = VideoLoader(index, num_workers=args.workers, device="cuda", **kwargs, **extra)
            row[label] = _measure(loader, args.warmup, args.batches)
            print(name, label, json.dumps(row[label]), flush=True)
        total = row["cpu"]["frames_per_s"] + row["nvdec"]["frames_per_s"]
        row["combo_over_sum"] = row["combo"]["frames_per_s"] / total
        row["share_over_sum"] = row["combo-share-0.5"]["frames_per_s"] / total
        print(name, "combo / (cpu + nvdec) =", round(row["combo_over_sum"], 3), flush=True)
        results[name] = row
    with open(args.out, "w") as f:
        json.dump({"scale": args.scale, "workers": args.workers, "batches": args.batches,
                   "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
