"""Is it the files? (issue 15). Inside the GPU JPEG loader a batch's nvImageCodec decode takes
3-6× what the same decode takes alone (session13-6/NOTE.md), and the two differ in one more
way than the rest of the loader: the loader hands nvImageCodec paths (``decode_files``: a
``CodeStream`` per path, the file read in C++), the decode-alone figure bytes read beforehand.
This times vidloader's decoder (``NvImageCodecDecoder``) on the same 256-file batches, each
batch synchronised, one and two threads each with its own decoder:

- ``bytes``: files read before timing, ``decode(blobs)`` (the decode-alone figure);
- ``paths``: ``decode_files(paths)`` (what the loader does);
- ``paths, streams beforehand``: the ``CodeStream(path)`` objects made before timing, only
  nvImageCodec's decode timed (is it the opening or the decode that reads?);
- ``bytes read in the loop``: Python's ``read_bytes`` per file inside the timed loop;

then the loader itself (the image bench's JPEG workload) for the same files.

Usage (on the device): ``python3 benchmarks/diag/jpeg_paths_probe.py [files] [seconds]``;
prints a line per variant and writes ``$OUT/jpeg_paths_probe.json``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

from vidloader.bench import _images as bench
from vidloader.images import ImageFolder
from vidloader.images._nvimgcodec import NvImageCodecDecoder
from vidloader.images._synthetic import write_image_folder

BATCH = 256


def _variant(name: str, paths: list[str]):
    """A function decoding one batch of ``paths`` the way ``name`` says, synchronised."""
    decoder = NvImageCodecDecoder(torch.device("cuda", 0))
    stream = torch.cuda.Stream()
    blobs = {p: Path(p).read_bytes() for p in paths} if name == "bytes" else None
    streams = ({p: decoder._open(p) for p in paths} if name == "paths, streams beforehand" else None)

    def run(batch: list[str]) -> int:
        with torch.cuda.stream(stream):
            if name == "bytes":
                out = decoder.decode([blobs[p] for p in batch])
            elif name == "paths":
                out = decoder.decode_files(batch)
            elif name == "paths, streams beforehand":
                todo = list(range(len(batch)))
                out = [None] * len(batch)
                decoder._decode_into(out, todo, [streams[p] for p in batch])
            else:  # bytes read in the loop
                out = decoder.decode([Path(p).read_bytes() for p in batch])
        stream.synchronize()
        return sum(x is not None for x in out)
    return run


def _rate(name: str, paths: list[str], seconds: float, threads: int) -> dict:
    runs = [_variant(name, paths) for _ in range(threads)]
    batches = [paths[k:k + BATCH] for k in range(0, len(paths) - BATCH + 1, BATCH)]
    for r in runs:
        r(batches[0])  # warm-up
    done, stop = [0] * threads, time.perf_counter() + seconds

    def loop(t: int) -> None:
        k = t
        while time.perf_counter() < stop:
            done[t] += runs[t](batches[k % len(batches)])
            k += threads
    start = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(loop, range(threads)))
    elapsed = time.perf_counter() - start
    return {"images_per_s": sum(done) / elapsed, "images": sum(done), "seconds": elapsed,
            "threads": threads, "batch": BATCH}


def main() -> int:
    files = int(sys.argv[1]) if len(sys.argv) > 1 else 4000
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 4.0
    root = write_image_folder("/tmp/jpeg-paths", num_classes=10, per_class=files // 10)
    folder = ImageFolder(root, progress=False)
    paths = [folder.path(i) for i in range(len(folder))]
    results: dict = {"files": len(paths), "gpu": torch.cuda.get_device_name(0)}
    for threads in (1, 2):
        for name in ("bytes", "paths", "paths, streams beforehand", "bytes read in the loop"):
            label = f"{name}, {threads} thread{'s' if threads > 1 else ''}"
            results[label] = _rate(name, paths, seconds, threads)
            print(f"{label:45s} {results[label]['images_per_s']:8.0f} images/s", flush=True)
    bench._attempt(results, "loader", lambda: bench._jpeg_vidloader(folder, "cuda", BATCH, 60, "nvimgcodec", 0))
    out = Path(os.environ.get("OUT", ".")) / "jpeg_paths_probe.json"
    out.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
