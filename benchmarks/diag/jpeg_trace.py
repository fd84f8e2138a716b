"""Where the GPU JPEG loader's decode calls wait (issue 15): inside the loader each
nvImageCodec decode call takes 3-6× what the same decode takes alone
(``benchmarks/results/gpu/session13-6/NOTE.md``). This traces both with torch's profiler
(CPU and CUDA activities, through CUPTI): the CUDA runtime calls on the host (synchronise,
malloc/free, event waits) by thread, and the kernels on each stream, for a few batches of the
loader and of decode alone on the same files.

Usage (on the device, nvImageCodec installed): ``python3 benchmarks/diag/jpeg_trace.py
[files] [batches]``; prints the host-side CUDA calls that take the most time in each case and
writes ``$OUT/jpeg_trace_{loader,alone}.json.gz`` (Chrome traces: open in Perfetto) and
``$OUT/jpeg_trace.json`` (the tables).
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import sys
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from vidloader.bench import _images as bench
from vidloader.images import ImageFolder
from vidloader.images._nvimgcodec import NvImageCodecDecoder
from vidloader.images._synthetic import write_image_folder
from vidloader.pipeline import ImageLoader

#: Host-side names worth reading: the runtime and driver calls that can wait on the GPU.
WAITS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaFree",
         "cudaMalloc", "cudaFreeAsync", "cudaMallocAsync", "cudaMemcpy", "cudaMemcpyAsync",
         "cudaStreamWaitEvent", "cuMemFree", "cuMemAlloc", "cudaHostAlloc", "cudaFreeHost")


def _table(prof, top: int = 25) -> list[dict]:
    rows = []
    for e in prof.key_averages():
        rows.append({"name": e.key, "calls": e.count, "cpu_total_ms": e.cpu_time_total / 1e3,
                     "self_cpu_ms": e.self_cpu_time_total / 1e3,
                     "device_ms": getattr(e, "device_time_total", getattr(e, "cuda_time_total", 0)) / 1e3})
    rows.sort(key=lambda r: -r["self_cpu_ms"])
    return rows[:top]


def _save_trace(prof, name: str) -> None:
    out = Path(os.environ.get("OUT", "."))
    raw = out / f"jpeg_trace_{name}.json"
    prof.export_chrome_trace(str(raw))
    with open(raw, "rb") as f, gzip.open(f"{raw}.gz", "wb") as g:
        shutil.copyfileobj(f, g)
    raw.unlink()


def _print(name: str, rows: list[dict]) -> None:
    print(f"== {name}: host time by call (self), the waits marked *", flush=True)
    for r in rows:
        mark = "*" if any(r["name"].startswith(w) for w in WAITS) else " "
        print(f"{mark} {r['name'][:60]:<60} {r['calls']:>7} calls {r['self_cpu_ms']:>10.1f} ms self "
              f"{r['device_ms']:>9.1f} ms device", flush=True)


def main() -> int:
    files = int(sys.argv[1]) if len(sys.argv) > 1 else 4000
    batches = int(sys.argv[2]) if len(sys.argv) > 2 else 12
    root = write_image_folder("/tmp/jpeg-trace-x5", num_classes=10, per_class=files // 10, copies=5)
    folder = ImageFolder(root, progress=False)
    activities = [ProfilerActivity.CPU, ProfilerActivity.CUDA]
    results: dict = {"files": len(folder), "batches": batches}

    loader = ImageLoader(folder, batch_size=256, processing=bench._rrc_proc(), device="cuda",
                         decoder="nvimgcodec", persistent_workers=True)
    it = iter(loader)
    for _ in range(6):  # warm: decoders, kernels, allocator pools
        next(it)
    torch.cuda.synchronize()
    with profile(activities=activities) as prof:
        for _ in range(batches):
            next(it)
        torch.cuda.synchronize()
    loader.shutdown()
    results["loader"] = _table(prof)
    _print("loader", results["loader"])
    _save_trace(prof, "loader")

    decoder = NvImageCodecDecoder(torch.device("cuda", 0))
    blobs = list(bench._files(folder, 256, batches + 4))
    for b in blobs[:4]:
        decoder.decode(b)
    torch.cuda.synchronize()
    with profile(activities=activities) as prof:
        for b in blobs[4:]:
            decoder.decode(b)
        torch.cuda.synchronize()
    results["alone"] = _table(prof)
    _print("decode alone", results["alone"])
    _save_trace(prof, "alone")
    (Path(os.environ.get("OUT", ".")) / "jpeg_trace.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
