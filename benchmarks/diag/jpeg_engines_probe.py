"""nvImageCodec's backends side by side (issue 15; written in session 26, for session 27).

Session 26 found nvImageCodec's decode alone at 13,000-19,000 images/s on an H200 however it
is fed (options, threads, own nvJPEG handles: ``session26-4``, ``-10``), all of it on the
hardware JPEG decoder (``HW_GPU_ONLY``, load 1.0), while torchvision's batched nvJPEG ran at
20,424 and DALI's whole pipeline at 24,243 in one call (``session26-9``). The issue's target
names "the hardware JPEG decoders and CUDA decoding together". This times, on the same
batches of bytes read beforehand (packed decode, 256 a batch, each synchronised), decoders
restricted to one backend each, alone and then at once on separate threads (each thread its
own decoder, stream and batches): whether CUDA decoding adds to the hardware decoder's pace
rather than taking from it. Two rounds, alternated.

Then (``PARAMS``) the gap to torchvision: torchvision's ``decode_jpeg(list, device="cuda")``
drives the same hardware decoder (``NVJPEG_BACKEND_HARDWARE``, default flags, planar RGB
out) at 20,424 images/s against 16,263 for nvImageCodec in session26-9. Here one thread
times nvImageCodec's own ``decode`` (its allocations) on the hardware backend with
interleaved RGB (vidloader's packed format), planar RGB, and its default parameters, with and
without EXIF orientation; vidloader's packed decode; and torchvision's, alternated.

Usage (on the device): ``python3 benchmarks/diag/jpeg_engines_probe.py [images] [batches]``;
prints a line per setting (total and per thread) and writes ``$OUT/jpeg_engines_probe.json``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch
from _decode_threads import probe_folder, time_decoders

from vidloader.images import _nvimgcodec

DEV = torch.device("cuda", 0)
KINDS = {"hw": ("HW_GPU_ONLY",), "cuda": ("GPU_ONLY",), "hybrid": ("HYBRID_CPU_GPU",),
         "all": _nvimgcodec.BACKENDS}
SETTINGS = {  # label: one kind per thread
    "hw": ("hw",),
    "cuda": ("cuda",),
    "hybrid": ("hybrid",),
    "hw + cuda": ("hw", "cuda"),
    "hw + hybrid": ("hw", "hybrid"),
    "hw + cuda + cuda": ("hw", "cuda", "cuda"),
    "hw + hw": ("hw", "hw"),
    "all (as shipped) x 2": ("all", "all"),
}


def decoder(kind: str):
    """An ``NvImageCodecDecoder`` offering only ``kind``'s backends (the constructor reads the
    module's ``BACKENDS``)."""
    saved = _nvimgcodec.BACKENDS
    _nvimgcodec.BACKENDS = KINDS[kind]
    try:
        return _nvimgcodec.NvImageCodecDecoder(DEV)
    finally:
        _nvimgcodec.BACKENDS = saved


def run(folder, blobs: dict, kinds: tuple, batches: int) -> tuple[float, list[float]]:
    rng = np.random.default_rng(len(kinds))
    plans = [[rng.choice(len(folder), 256, replace=False) for _ in range(batches)] for _ in kinds]
    return time_decoders([decoder(kind) for kind in kinds], plans,
                         lambda dec, idx: dec.decode_packed([blobs[i] for i in idx.tolist()],
                                                            folder.sizes[idx]), DEV)


def params_run(folder, blobs: dict, label: str, batches: int) -> float:
    """One thread, ``batches`` synchronised batches of 256 bytes read beforehand."""
    from nvidia import nvimgcodec

    rng = np.random.default_rng(7)
    plans = [rng.choice(len(folder), 256, replace=False) for _ in range(batches + 1)]
    if label == "torchvision decode_jpeg":
        from torchvision.io import decode_jpeg

        tensors = {i: torch.frombuffer(bytearray(b), dtype=torch.uint8) for i, b in blobs.items()}
        def once(idx):  # noqa: E306
            return decode_jpeg([tensors[i] for i in idx.tolist()], device=DEV)
    elif label == "vidloader decode_packed":
        dec = decoder("hw")
        def once(idx):  # noqa: E306
            return dec.decode_packed([blobs[i] for i in idx.tolist()], folder.sizes[idx])
    else:
        fmt, exif = PARAMS[label]
        raw = nvimgcodec.Decoder(device_id=0, backends=[nvimgcodec.Backend(
            nvimgcodec.BackendKind.HW_GPU_ONLY, load_hint=1.0)])
        params = (nvimgcodec.DecodeParams(apply_exif_orientation=exif) if fmt is None else
                  nvimgcodec.DecodeParams(apply_exif_orientation=exif,
                                          color_spec=nvimgcodec.ColorSpec.SRGB,
                                          allow_any_depth=False,
                                          sample_format=getattr(nvimgcodec.SampleFormat, fmt)))
        stream = torch.cuda.current_stream(DEV).cuda_stream
        def once(idx):  # noqa: E306
            return raw.decode([nvimgcodec.CodeStream(blobs[i]) for i in idx.tolist()], params=params,
                       cuda_stream=stream)
    out = once(plans[0])  # warm-up; each output kept until its batch has synchronised
    torch.cuda.synchronize(DEV)
    t0 = time.perf_counter()
    for idx in plans[1:]:
        out = once(idx)
        torch.cuda.synchronize(DEV)
    del out
    return batches * 256 / (time.perf_counter() - t0)


PARAMS = {  # label: (sample format or None for nvImageCodec's defaults, EXIF orientation)
    "nvimgcodec I_RGB, exif": ("I_RGB", True),
    "nvimgcodec P_RGB, exif": ("P_RGB", True),
    "nvimgcodec I_RGB, no exif": ("I_RGB", False),
    "nvimgcodec P_RGB, no exif": ("P_RGB", False),
    "nvimgcodec defaults": (None, True),
    "vidloader decode_packed": None,
    "torchvision decode_jpeg": None,
}


def main() -> int:
    folder, blobs, batches = probe_folder()
    result: dict = {"files": len(folder), "batch": 256, "batches": batches}
    for round_ in (1, 2):
        for label, kinds in SETTINGS.items():
            try:
                total, each = run(folder, blobs, kinds, batches)
            except Exception as exc:  # noqa: BLE001 - a backend this build lacks: say so, go on
                result[f"{label}, round {round_}"] = {"error": repr(exc)}
                print(f"{label}, round {round_}: {exc!r}", flush=True)
                continue
            result[f"{label}, round {round_}"] = {"total": total, "per_thread": each}
            per = " + ".join(f"{k} {r:,.0f}" for k, r in zip(kinds, each))
            print(f"{label + ', round ' + str(round_):30s} {total:8,.0f} images/s  ({per})", flush=True)
    for round_ in (1, 2):
        for label in PARAMS:
            try:
                rate = params_run(folder, blobs, label, batches)
            except Exception as exc:  # noqa: BLE001 - say what failed, go on
                result[f"{label}, round {round_}"] = {"error": repr(exc)}
                print(f"{label}, round {round_}: {exc!r}", flush=True)
                continue
            result[f"{label}, round {round_}"] = rate
            print(f"{label + ', round ' + str(round_):40s} {rate:8,.0f} images/s", flush=True)
    (Path(os.environ.get("OUT", ".")) / "jpeg_engines_probe.json").write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
