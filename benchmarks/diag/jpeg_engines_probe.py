"""nvImageCodec's backends side by side, and the gap to torchvision (issue 15; written in
session 26, for session 27).

Session 26 found nvImageCodec's decode alone at 13,000-19,000 images/s on an H200 however it
is fed (options, threads, own nvJPEG handles: ``session26-4``, ``-10``), all of it on the
hardware JPEG decoder (``HW_GPU_ONLY``, load 1.0), while torchvision's batched nvJPEG ran at
20,424 and DALI's whole pipeline at 24,243 in one call (``session26-9``).

First (``PARAMS``), one thread each: nvImageCodec's own ``decode`` (its allocations) on the
hardware backend with interleaved RGB (vidloader's packed format) or planar RGB, with and
without EXIF orientation; vidloader's packed decode; and torchvision's
``decode_jpeg(list, device="cuda")``, which drives the same hardware decoder
(``NVJPEG_BACKEND_HARDWARE``, default flags, planar RGB out).

Then (``SETTINGS``) decoders restricted to one backend each, alone and at once on separate
threads (each its own decoder, stream and batches): does nvJPEG's CUDA decoder (the
``HYBRID_CPU_GPU`` backend, with GPU or CPU Huffman decoding) add to the hardware decoder's
pace rather than take from it? The issue's target names "the hardware JPEG decoders and CUDA
decoding together".

Each row decodes batches of 256 (bytes read beforehand, each batch synchronised) for 3 s
(``_decode_threads.time_decoders``: totals summed over threads); three rounds, alternated.

Usage (on the device): ``python3 benchmarks/diag/jpeg_engines_probe.py [images] [batches]``;
prints a line per row and writes ``$OUT/jpeg_engines_probe.json`` after each.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import torch
from _decode_threads import probe_folder, time_decoders

from vidloader.images import _nvimgcodec

DEV = torch.device("cuda", 0)
#: kind: (backends, decoder options). nvImageCodec 0.9 has no GPU_ONLY JPEG decoder; its
#: nvJPEG CUDA decoder is the HYBRID_CPU_GPU backend, which does the Huffman decoding on the
#: CPU below 1e6 pixels unless its threshold is lowered (helper 92, session 26).
KINDS = {"hw": (("HW_GPU_ONLY",), ""),
         "cuda": (("HYBRID_CPU_GPU",), "nvjpeg_cuda_decoder:hybrid_huffman_threshold=0"),
         "hybrid": (("HYBRID_CPU_GPU",), ""),
         "all": (_nvimgcodec.BACKENDS, "")}
SETTINGS = {  # label: one kind per thread
    "hw": ("hw",),
    "cuda (GPU Huffman)": ("cuda",),
    "hybrid (CPU Huffman)": ("hybrid",),
    "hw + cuda": ("hw", "cuda"),
    "hw + hybrid": ("hw", "hybrid"),
    "hw + cuda + cuda": ("hw", "cuda", "cuda"),
    "hw + hw": ("hw", "hw"),
    "all (as shipped) x 2": ("all", "all"),
}
ROUNDS = 3


def decoder(kind: str):
    """An ``NvImageCodecDecoder`` offering only ``kind``'s backends (the constructor reads the
    module's ``BACKENDS``), with its options."""
    backends, options = KINDS[kind]
    saved = _nvimgcodec.BACKENDS
    _nvimgcodec.BACKENDS = backends
    try:
        return _nvimgcodec.NvImageCodecDecoder(DEV, options=options)
    finally:
        _nvimgcodec.BACKENDS = saved


def plans_for(folder, threads: int, batches: int, seed: int) -> list[list]:
    rng = np.random.default_rng(seed)
    return [[rng.choice(len(folder), 256, replace=False) for _ in range(batches)]
            for _ in range(threads)]


def engines_run(folder, blobs: dict, kinds: tuple, batches: int) -> dict:
    decoders = [decoder(kind) for kind in kinds]
    total, each = time_decoders(
        decoders, plans_for(folder, len(kinds), batches, len(kinds)),
        lambda dec, idx: dec.decode_packed([blobs[i] for i in idx.tolist()], folder.sizes[idx]), DEV)
    # An engine that refuses images hands them to Pillow: its pace would not be its own.
    return {"total": total, "per_thread": each,
            "pillow_fallbacks": [d.cpu_fallbacks for d in decoders]}


#: label: (sample format, EXIF orientation), or None for the two named decoders. The
#: generated files have no EXIF: the EXIF rows show only its per-call cost.
PARAMS = {
    "nvimgcodec I_RGB, exif": ("I_RGB", True),
    "nvimgcodec P_RGB, exif": ("P_RGB", True),
    "nvimgcodec I_RGB, no exif": ("I_RGB", False),
    "nvimgcodec P_RGB, no exif": ("P_RGB", False),
    "vidloader decode_packed (hw)": None,
    "torchvision decode_jpeg": None,
}


def params_run(folder, blobs: dict, label: str, batches: int) -> float:
    """One thread: nvImageCodec's raw decode (its allocations, hardware backend) with the
    row's parameters, vidloader's packed decode, or torchvision's batched nvJPEG."""
    from nvidia import nvimgcodec

    if label == "torchvision decode_jpeg":
        from torchvision.io import decode_jpeg

        tensors = {i: torch.frombuffer(bytearray(b), dtype=torch.uint8) for i, b in blobs.items()}
        dec, decode = None, lambda _, idx: decode_jpeg([tensors[i] for i in idx.tolist()], device=DEV)
    elif label.startswith("vidloader decode_packed"):
        dec = decoder("hw")
        decode = lambda d, idx: d.decode_packed([blobs[i] for i in idx.tolist()], folder.sizes[idx])  # noqa: E731
    else:
        fmt, exif = PARAMS[label]
        dec = nvimgcodec.Decoder(device_id=0, backends=[nvimgcodec.Backend(
            nvimgcodec.BackendKind.HW_GPU_ONLY, load_hint=1.0)])
        params = nvimgcodec.DecodeParams(apply_exif_orientation=exif,
                                         color_spec=nvimgcodec.ColorSpec.SRGB,
                                         allow_any_depth=False,
                                         sample_format=getattr(nvimgcodec.SampleFormat, fmt))

        def decode(d, idx):
            return d.decode([nvimgcodec.CodeStream(blobs[i]) for i in idx.tolist()], params=params,
                            cuda_stream=torch.cuda.current_stream(DEV).cuda_stream)
    total, _ = time_decoders([dec], plans_for(folder, 1, batches, 7), decode, DEV)
    return total


def record(result: dict, key: str, value) -> None:
    """Keep a row and write the JSON at once (a later row cut short keeps what came before)."""
    result[key] = value
    (Path(os.environ.get("OUT", ".")) / "jpeg_engines_probe.json").write_text(
        json.dumps(result, indent=1))


def main() -> int:
    folder, blobs, batches = probe_folder()
    result: dict = {"files": len(folder), "batch": 256, "batches_per_thread": batches,
                    "seconds_per_row": 3.0}
    for round_ in range(1, ROUNDS + 1):  # the gap to torchvision first: the shorter part
        for label in PARAMS:
            try:
                rate = params_run(folder, blobs, label, batches)
            except Exception as exc:  # noqa: BLE001 - say what failed, go on
                record(result, f"{label}, round {round_}", {"error": repr(exc)})
                print(f"{label}, round {round_}: {exc!r}", flush=True)
                continue
            record(result, f"{label}, round {round_}", rate)
            print(f"{label + ', round ' + str(round_):40s} {rate:8,.0f} images/s", flush=True)
    for round_ in range(1, ROUNDS + 1):
        for label, kinds in SETTINGS.items():
            try:
                row = engines_run(folder, blobs, kinds, batches)
            except Exception as exc:  # noqa: BLE001 - a backend this build lacks: say so, go on
                record(result, f"{label}, round {round_}", {"error": repr(exc)})
                print(f"{label}, round {round_}: {exc!r}", flush=True)
                continue
            record(result, f"{label}, round {round_}", row)
            per = " + ".join(f"{k} {r:,.0f}" for k, r in zip(kinds, row["per_thread"]))
            print(f"{label + ', round ' + str(round_):36s} {row['total']:8,.0f} images/s  ({per}; "
                  f"Pillow fallbacks {row['pillow_fallbacks']})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
