"""The GPU JPEG loader (224² random resized crop + flip + normalize, batch 256) with its
nvImageCodec work in 0 (this process) to N worker processes, one loader after another on the
same files (issue 15; ``pipeline/_image_gpu_workers.py``). Per count: images/s over a timed
window after warm-up, and the GPU memory ``nvidia-smi`` saw during it.

Usage (on the device): ``python3 benchmarks/diag/jpeg_workers_sweep.py [files] [seconds]
[K,K,...]``; writes ``$OUT/jpeg_workers_sweep.json``.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path

import torch
from process_scaling_probe import _gpu_used_mib  # this folder: the script's own

from vidloader.bench._images import _rrc_proc
from vidloader.images import ImageFolder
from vidloader.images._synthetic import write_image_folder
from vidloader.pipeline import ImageLoader

BATCH = 256
WARMUP_S = 4.0


def warm_jpeg_loader(folder, workers: int):
    """``(loader, batches, first_batch_s)``: the GPU JPEG loader with ``workers`` processes,
    its batches epoch after epoch, warmed up for :data:`WARMUP_S` and synchronised."""
    t0 = time.perf_counter()
    loader = ImageLoader(folder, batch_size=BATCH, processing=_rrc_proc(), device="cuda",
                         decoder="nvimgcodec", num_workers=workers, persistent_workers=True)

    def batches():
        while True:
            yield from loader
    it = batches()
    next(it)
    first_s = time.perf_counter() - t0
    warm = time.perf_counter()
    while time.perf_counter() - warm < WARMUP_S:
        next(it)
    torch.cuda.synchronize()
    return loader, it, first_s


def _one(folder, workers: int, seconds: float) -> dict:
    loader, it, first_s = warm_jpeg_loader(folder, workers)
    peak = [0]

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], _gpu_used_mib())
            done.wait(0.5)
    done = threading.Event()
    sampler = threading.Thread(target=sample)
    sampler.start()
    start, n = time.perf_counter(), 0
    while time.perf_counter() - start < seconds:
        n += next(it)["images"].shape[0]
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    done.set()
    sampler.join()
    loader.shutdown()
    return {"workers": workers, "images_per_s": n / elapsed, "images": n, "seconds": elapsed,
            "first_batch_s": first_s, "gpu_used_mib_peak": peak[0]}


def main() -> int:
    files = int(sys.argv[1]) if len(sys.argv) > 1 else 8000
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 8.0
    counts = [int(k) for k in (sys.argv[3] if len(sys.argv) > 3 else "0,2,3,4,6").split(",")]
    root = write_image_folder("/tmp/jpeg-scaling", num_classes=10, per_class=files // 40, copies=4)
    folder = ImageFolder(root, progress=False)
    rows = []
    for workers in counts:
        row = _one(folder, workers, seconds)
        rows.append(row)
        print(f"workers {workers}: {row['images_per_s']:8.0f} images/s, first batch "
              f"{row['first_batch_s']:.1f} s, GPU peak {row['gpu_used_mib_peak']} MiB", flush=True)
    out = Path(os.environ.get("OUT", ".")) / "jpeg_workers_sweep.json"
    out.write_text(json.dumps({"files": len(folder), "seconds": seconds, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
