"""nvImageCodec's packed decode alone under its decoder options (issue 15, session 26).

Session 26's calls 1-3 brought the loader to 13,000-15,800 images/s on an H200, against
16,500-17,600 for this decode alone on bytes read beforehand, and DALI's decoder reaches
~25,000 on such files. nvImageCodec 0.9's hardware decoder interpolates chroma by default
(``fancy_upsampling``; DALI's decoder does not) and preallocates for a batch of one
(``preallocate_batch_size``, width and height hints), and DALI hands nvJPEG its bitstreams in
pinned memory. This times ``decode_packed`` on the same batches of bytes under each setting,
alternated over two rounds, one thread (and two threads for two of them), each batch
synchronised.

Usage (on the device): ``python3 benchmarks/diag/jpeg_options_probe.py [images] [batches]``;
writes ``$OUT/jpeg_options_probe.json``.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import torch
from _decode_threads import probe_folder, time_decoders

from vidloader.images._nvimgcodec import NvImageCodecDecoder

DEV = torch.device("cuda", 0)
PREALLOCATE = ("nvjpeg_hw_decoder:preallocate_batch_size=256 "
               "nvjpeg_hw_decoder:preallocate_width_hint=500 "
               "nvjpeg_hw_decoder:preallocate_height_hint=375")
VARIANTS = {  # label: (options, bitstreams in pinned memory, threads)
    "default": ("", False, 1),
    "fancy_upsampling=0": (":fancy_upsampling=0", False, 1),
    "preallocate 256 x 500 x 375": (PREALLOCATE, False, 1),
    "fancy_upsampling=0 + preallocate": (":fancy_upsampling=0 " + PREALLOCATE, False, 1),
    "fancy_upsampling=0 + preallocate, pinned input": (":fancy_upsampling=0 " + PREALLOCATE,
                                                        True, 1),
    "default, pinned input": ("", True, 1),
    "force_batch_single=1": ("nvjpeg_hw_decoder:force_batch_single=1", False, 1),
    "default, 2 threads": ("", False, 2),
    "fancy_upsampling=0 + preallocate, 2 threads": (":fancy_upsampling=0 " + PREALLOCATE,
                                                     False, 2),
}
#: Session 26, call 10: nvImageCodec shares one nvJPEG handle (and the hardware decoder's
#: "previous batch done" event) between decoders of the same device and flags; decoders whose
#: flags differ get their own. nvJPEG's flags: 2 enables its memory pools, 1 turns off the
#: hardware decoder's pipelining. A tuple gives each thread its own options.
HANDLES = {
    "default": ("", False, 1),
    "extra_flags=2 (memory pools)": ("nvjpeg_hw_decoder:extra_flags=2", False, 1),
    "default, 2 threads": ("", False, 2),
    "2 threads, own handles (flags 0 / 2)": (("", "nvjpeg_hw_decoder:extra_flags=2"), False, 2),
    "3 threads, own handles (flags 0 / 2 / 8)": (
        ("", "nvjpeg_hw_decoder:extra_flags=2", "nvjpeg_hw_decoder:extra_flags=8"), False, 3),
    "default, 3 threads": ("", False, 3),
}


def pinned_copies(blobs: dict) -> dict:
    """Every file's bytes as a numpy view of one pinned buffer."""
    total = sum(len(b) for b in blobs.values())
    buffer = torch.empty(total, dtype=torch.uint8, pin_memory=True)
    flat = buffer.numpy()
    views, at = {}, 0
    for i, blob in blobs.items():
        flat[at:at + len(blob)] = np.frombuffer(blob, np.uint8)
        views[i] = flat[at:at + len(blob)]
        at += len(blob)
    views["_keep"] = buffer
    return views


def run(folder, sources: dict, options: str | tuple, threads: int, batches: int) -> float:
    rng = np.random.default_rng(threads)
    plans = [[rng.choice(len(folder), 256, replace=False) for _ in range(batches)]
             for _ in range(threads)]
    per_thread = options if isinstance(options, tuple) else (options,) * threads
    decoders = [NvImageCodecDecoder(DEV, options=per_thread[k]) for k in range(threads)]
    total, _ = time_decoders(decoders, plans,
                             lambda dec, idx: dec.decode_packed([sources[i] for i in idx.tolist()],
                                                                folder.sizes[idx]), DEV)
    return total


def main() -> int:
    folder, blobs, batches = probe_folder()
    pinned = pinned_copies(blobs)
    only = os.environ.get("OPTIONS_ONLY")
    result: dict = {"files": len(folder), "batch": 256, "batches": batches}
    variants = HANDLES if os.environ.get("OPTIONS_SET") == "handles" else VARIANTS
    result["set"] = os.environ.get("OPTIONS_SET", "options")
    for round_ in (1, 2):
        for label, (options, in_pinned, threads) in variants.items():
            if only and only not in label:
                continue
            rate = run(folder, pinned if in_pinned else blobs, options, threads, batches)
            result[f"{label}, round {round_}"] = rate
            print(f"{label + ', round ' + str(round_):58s} {rate:8,.0f} images/s", flush=True)
    (Path(os.environ.get("OUT", ".")) / "jpeg_options_probe.json").write_text(
        json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
