"""Does the GPU JPEG loader scale with processes where it does not with threads? (issue 15)

Session 17 (``session17-8``) found nvImageCodec's decode taking the GIL ~3.4 times an image and
the loader's augmentation ~400 launches a batch from Python: in one process the two halve
each other (the loader's 6-8k images/s against 10.6k for the decode alone). Processes have a
GIL each. This runs ``K`` processes at once on one GPU, each a whole ``ImageLoader`` on its
rank's share of the same JPEG folder (``rank=k, world_size=K``), their timed windows starting
at one wall-clock moment, and reports the sum of their images/s for each ``K``; also the
decode alone (``decode_files`` on 256-file batches) in ``K`` processes, and the GPU memory
``nvidia-smi`` saw during the window (each process has a CUDA context of its own).

Usage (on the device): ``python3 benchmarks/diag/process_scaling_probe.py [files] [seconds]
[K,K,...]``; prints a line per (mode, K) and writes ``$OUT/process_scaling_probe.json``.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import subprocess
import sys
import time
from pathlib import Path

BATCH = 256
#: Seconds each process gets for its imports, CUDA's start, the loader's start and warm-up
#: before the common window opens.
SLACK_S = 20.0


def _gpu_used_mib() -> int:
    out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, check=False).stdout.split()
    return int(out[0]) if out else -1


def _child(mode: str, rank: int, world: int, root: str, start_at: float, seconds: float, box) -> None:
    import torch

    from vidloader.bench._images import _rrc_proc
    from vidloader.images import ImageFolder
    from vidloader.pipeline import ImageLoader

    torch.cuda.init()
    folder = ImageFolder(root, progress=False)
    if mode == "loader":
        loader = ImageLoader(folder, batch_size=BATCH, processing=_rrc_proc(), device="cuda",
                             decoder="nvimgcodec", rank=rank, world_size=world,
                             persistent_workers=True)

        def batches():
            while True:
                for batch in loader:
                    yield batch["images"].shape[0]
    else:
        from vidloader.images._nvimgcodec import NvImageCodecDecoder

        decoder = NvImageCodecDecoder(torch.device("cuda", 0))
        paths = [folder.path(i) for i in range(rank, len(folder), world)]

        def batches():
            k = 0
            while True:
                chunk = [paths[(k * BATCH + j) % len(paths)] for j in range(BATCH)]
                k += 1
                yield sum(x is not None for x in decoder.decode_files(chunk))
    it = batches()
    while time.time() < start_at:  # warm up until the common window opens
        next(it)
    torch.cuda.synchronize()
    t0, n = time.perf_counter(), 0
    while time.perf_counter() - t0 < seconds:
        n += next(it)
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - t0
    late = time.time() - start_at - elapsed
    box.put({"rank": rank, "images": n, "seconds": elapsed, "images_per_s": n / elapsed,
             "late_s": round(late, 3)})
    if mode == "loader":
        loader.shutdown()


def _run(mode: str, world: int, root: str, seconds: float) -> dict:
    ctx = mp.get_context("spawn")
    box = ctx.Queue()
    start_at = time.time() + SLACK_S
    procs = [ctx.Process(target=_child, args=(mode, k, world, root, start_at, seconds, box))
             for k in range(world)]
    for p in procs:
        p.start()
    time.sleep(max(0.0, start_at - time.time() + seconds / 2))
    gpu_mib = _gpu_used_mib()
    results = []
    for _ in procs:
        try:
            results.append(box.get(timeout=SLACK_S + seconds + 120))
        except Exception as exc:  # noqa: BLE001 - a child that died: reported, the rest go on
            results.append({"error": repr(exc)})
    for p in procs:
        p.join(timeout=30)
        if p.is_alive():
            p.kill()
    total = sum(r.get("images_per_s", 0.0) for r in results)
    return {"mode": mode, "processes": world, "images_per_s": total, "gpu_used_mib": gpu_mib,
            "children": results}


def main() -> int:
    from vidloader.images._synthetic import write_image_folder

    files = int(sys.argv[1]) if len(sys.argv) > 1 else 8000
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 6.0
    counts = [int(k) for k in (sys.argv[3] if len(sys.argv) > 3 else "1,2,3,4").split(",")]
    modes = (sys.argv[4] if len(sys.argv) > 4 else "loader,decode").split(",")
    # A quarter of the files generated, each under 4 names (hard links): generation is slow.
    root = str(write_image_folder("/tmp/jpeg-scaling", num_classes=10, per_class=files // 40,
                                  copies=4))
    rows = []
    for mode in modes:
        for world in counts:
            row = _run(mode, world, root, seconds)
            rows.append(row)
            print(f"{mode:7s} processes {world}: {row['images_per_s']:8.0f} images/s, "
                  f"GPU {row['gpu_used_mib']} MiB, each "
                  f"{[round(c.get('images_per_s', 0)) for c in row['children']]}", flush=True)
    out = Path(os.environ.get("OUT", ".")) / "process_scaling_probe.json"
    out.write_text(json.dumps({"files": files, "seconds": seconds, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
