"""nvImageCodec's packed decode by what it is given, on 1 and 2 threads (issue 15, session 25).

Session 25's profile of the in-process pool (packed) found its two decode lanes the bound:
~55% of their time in the decode call, ~20% opening each file's ``CodeStream`` from its path.
Sessions 16 and 19 found decoding bytes faster than paths when the decode runs alone. This
times ``NvImageCodecDecoder.decode_packed`` on the same batches given paths, bytes read
beforehand, and bytes read in Python on the decoding thread, on one and on two threads
(each with its own decoder and CUDA stream), each batch synchronised.

Usage (on the device): ``python3 benchmarks/diag/jpeg_sources_probe.py [images] [batches]``;
writes ``$OUT/jpeg_sources_probe.json``.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import torch
from _decode_threads import time_decoders

from vidloader.images import ImageFolder
from vidloader.images._nvimgcodec import NvImageCodecDecoder
from vidloader.images._synthetic import write_image_folder
from vidloader.pipeline._image_fill import read_file

DEV = torch.device("cuda", 0)


def run(folder: ImageFolder, kind: str, threads: int, batches: int, blobs: dict) -> float:
    rng = np.random.default_rng(threads)
    plans = [[rng.choice(len(folder), 256, replace=False) for _ in range(batches)]
             for _ in range(threads)]
    options = os.environ.get("SOURCES_OPTIONS", "")  # nvImageCodec's decoder options
    decoders = [NvImageCodecDecoder(DEV, options=options) for _ in range(threads)]

    def sources(idx):
        if kind == "paths":
            return [folder.path(i) for i in idx.tolist()]
        if kind == "bytes read beforehand":
            return [blobs[i] for i in idx.tolist()]
        return [read_file(folder.path(i)) for i in idx.tolist()]

    def decode(dec, idx):
        return dec.decode_packed(sources(idx), folder.sizes[idx],
                                 cut_short=folder.cut_short[idx].tolist() if kind == "paths" else None)

    total, _ = time_decoders(decoders, plans, decode, DEV)
    return total


def main() -> int:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 4000
    batches = int(sys.argv[2]) if len(sys.argv) > 2 else 30
    root = write_image_folder("/tmp/jpeg-sources", num_classes=10, per_class=count // 10)
    folder = ImageFolder(root, progress=False)
    blobs = {i: Path(folder.path(i)).read_bytes() for i in range(len(folder))}
    result = {"options": os.environ.get("SOURCES_OPTIONS", "")}
    kinds = os.environ.get("SOURCES_KINDS", "paths|bytes read beforehand|bytes read in Python")
    for round_ in (1, 2):
        for threads in (1, 2):
            for kind in kinds.split("|"):
                rate = run(folder, kind, threads, batches, blobs)
                label = f"{kind}, {threads} thread{'s' if threads > 1 else ''}, round {round_}"
                result[label] = rate
                print(f"{label:50s} {rate:8,.0f} images/s", flush=True)
    (Path(os.environ.get("OUT", ".")) / "jpeg_sources_probe.json").write_text(
        json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
