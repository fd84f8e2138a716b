"""Soak: memory, file descriptors and /dev/shm entries of a loader over many batches.

Loads ``--batches`` batches (epochs chained, persistent workers) of uniform random frames
from generated videos and samples, every ``--every`` batches, the PSS and RSS of the loader
process and of its workers (``/proc/<pid>/smaps_rollup``), the loader's open descriptors and
the ``/dev/shm`` entries. Growth is reported as the last sample minus the first taken after
warm-up (batch ``--every``). Writes a JSON with every sample::

    python benchmarks/soak.py --batches 5000 --out benchmarks/results/reliability/soak-cpu.json

``--backend nvdec`` (on a GPU machine) also samples the GPU: ``torch.cuda.memory_allocated``
and ``memory_reserved`` of the loader process and the device's used memory as the driver
sees it (``torch.cuda.mem_get_info``), so a leak of decoder surfaces or staging memory shows
as growth after warm-up. ``--size`` sets the videos' frame size (NVDEC's minimum is larger
than the CPU default's 160x96)::

    python benchmarks/soak.py --backend nvdec --batches 20000 --size 640x360 --out soak-nvdec.json
"""

from __future__ import annotations

import argparse
import json
import os
import time


def _smaps(pid: int) -> dict:
    out = {}
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key in ("Rss", "Pss"):
                    out[key.lower()] = int(rest.split()[0]) * 1024
    except OSError:
        pass
    return out


def _children(pid: int) -> list[int]:
    try:
        import psutil

        return [c.pid for c in psutil.Process(pid).children(recursive=True)]
    except ImportError:
        return []


def _gpu() -> dict:
    """The loader process's GPU memory: what torch's allocator holds, and the device's used
    memory as the driver reports it (every context and decoder surface included)."""
    import torch

    free, total = torch.cuda.mem_get_info()
    return {"allocated": torch.cuda.memory_allocated(), "reserved": torch.cuda.memory_reserved(),
            "device_used": total - free}


def _sample(batch: int, t0: float, gpu: bool) -> dict:
    me = os.getpid()
    kids = [_smaps(p) for p in _children(me)]
    sample = {"batch": batch, "seconds": round(time.time() - t0, 1),
              "loader": _smaps(me), "children": len(kids),
              "children_pss": sum(k.get("pss", 0) for k in kids),
              "children_rss": sum(k.get("rss", 0) for k in kids),
              "fds": len(os.listdir(f"/proc/{me}/fd")),
              "shm": len(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else None}
    if gpu:
        sample["gpu"] = _gpu()
    return sample


def main() -> None:
    import vidloader
    from vidloader.synthetic import VideoSpec, make_dataset

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, default=5000)
    ap.add_argument("--every", type=int, default=250)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--data-dir", default="/tmp/vidloader-soak")
    ap.add_argument("--out", default="soak-cpu.json")
    ap.add_argument("--backend", choices=("cpu", "nvdec"), default="cpu")
    ap.add_argument("--size", default="160x96", help="the generated videos' WIDTHxHEIGHT")
    ap.add_argument("--batch-size", type=int, default=16)
    args = ap.parse_args()
    width, height = (int(v) for v in args.size.lower().split("x"))
    gpu = args.backend == "nvdec"
    specs = [VideoSpec(width=width, height=height, num_frames=60, gop=12, bframes=2, seed=s)
             for s in range(8)]
    index = vidloader.build_index(make_dataset(args.data_dir, specs), progress=False)
    loader = vidloader.VideoLoader(index, batch_size=args.batch_size, size=(64, 64),
                                   num_workers=args.workers, persistent_workers=True,
                                   backend=args.backend)
    t0, samples, n = time.time(), [], 0
    while n < args.batches:
        for _ in loader:
            n += 1
            if n % args.every == 0:
                samples.append(_sample(n, t0, gpu))
                print(json.dumps(samples[-1]), flush=True)
            if n >= args.batches:
                break
    loader.shutdown()
    first, last = samples[0], samples[-1]
    growth = {"loader_pss": last["loader"].get("pss", 0) - first["loader"].get("pss", 0),
              "children_pss": last["children_pss"] - first["children_pss"],
              "fds": last["fds"] - first["fds"], "shm": (last["shm"] or 0) - (first["shm"] or 0)}
    if gpu:
        growth.update({f"gpu_{k}": last["gpu"][k] - first["gpu"][k] for k in first["gpu"]})
    result = {"backend": args.backend, "size": args.size, "batches": n,
              "batch_size": args.batch_size, "workers": args.workers, "seconds": last["seconds"],
              "growth_after_warmup": growth, "samples": samples}
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    print("growth after warm-up:", growth)


if __name__ == "__main__":
    main()
