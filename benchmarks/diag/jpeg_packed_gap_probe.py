"""Why vidloader's packed decode trails nvImageCodec's own (issue 15; session 27).

Session 27's first call (``session27-1``, H200) timed nvImageCodec's raw decode on the
hardware backend, interleaved RGB into its own allocations, at 18,726-19,241 images/s over
three rounds, and vidloader's ``decode_packed`` on the same backend, bytes and batches at
13,562-16,629. The packed decode writes each image into one flat buffer, back to back: with
500x375 images every place after the first starts at a multiple of 562,500 bytes, aligned to
4 bytes only. Does nvJPEG's hardware decoder pay for unaligned places (``_packed.ALIGN_BYTES``
pads each start), or does the time go on the CPU (stage times below)?

Rows, one thread each, 3 s, three rounds alternated (``_decode_threads.time_decoders``):
nvImageCodec's raw decode (own allocations), ``decode_packed`` with places back to back and
aligned to 256 and 4,096 bytes, and the raw decode into places made by ``as_images`` (256-byte
aligned) without vidloader's checks. Then ``STAGE_BATCHES`` batches of ``decode_packed``
timed stage by stage (code streams and end checks, allocation, places, the decode call, the
size checks, the wait for the GPU), back to back and aligned.

Usage (on the device): ``python3 benchmarks/diag/jpeg_packed_gap_probe.py [images] [batches]``;
prints a line per row and writes ``$OUT/jpeg_packed_gap_probe.json`` after each.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch
from _decode_threads import hw_decoder, probe_folder, time_decoders

from vidloader.images import _packed
from vidloader.images._nvimgcodec import _BufferPart
from vidloader.images._packed import PackedImages

DEV = torch.device("cuda", 0)
ROUNDS = 3
STAGE_BATCHES = 40


def aligned(align: int, fn):
    def run(*args):
        saved = _packed.ALIGN_BYTES
        _packed.ALIGN_BYTES = align
        try:
            return fn(*args)
        finally:
            _packed.ALIGN_BYTES = saved
    return run


def rows(folder, blobs):
    from nvidia import nvimgcodec

    raw = nvimgcodec.Decoder(device_id=0, backends=[nvimgcodec.Backend(
        nvimgcodec.BackendKind.HW_GPU_ONLY, load_hint=1.0)])
    params = nvimgcodec.DecodeParams(apply_exif_orientation=True, color_spec=nvimgcodec.ColorSpec.SRGB,
                                     allow_any_depth=False, sample_format=nvimgcodec.SampleFormat.I_RGB)
    stream = lambda: torch.cuda.current_stream(DEV).cuda_stream  # noqa: E731

    def raw_own(dec, idx):
        return dec.decode([nvimgcodec.CodeStream(blobs[i]) for i in idx.tolist()], params=params,
                          cuda_stream=stream())

    def raw_places(dec, idx):
        packed = aligned(256, PackedImages.allocate)(folder.sizes[idx], DEV)
        places = nvimgcodec.as_images([_BufferPart(packed.pointer(k), int(packed.heights[k]),
                                                   int(packed.widths[k]), True) for k in range(len(idx))],
                                      cuda_stream=stream())
        dec.decode([nvimgcodec.CodeStream(blobs[i]) for i in idx.tolist()], images=places,
                   params=params, cuda_stream=stream())
        return packed

    def packed(dec, idx):
        return dec.decode_packed([blobs[i] for i in idx.tolist()], folder.sizes[idx])

    return {"raw, own allocations": (raw, raw_own),
            "decode_packed, back to back": (hw_decoder(DEV), aligned(1, packed)),
            "decode_packed, aligned 256 B": (hw_decoder(DEV), aligned(256, packed)),
            "decode_packed, aligned 4096 B": (hw_decoder(DEV), aligned(4096, packed)),
            "raw into places (256 B), no checks": (raw, raw_places)}


def stages(folder, blobs, align: int) -> dict:
    """Mean ms a batch in each stage of ``decode_packed`` (its code, step by step)."""
    dec = hw_decoder(DEV)
    rng = np.random.default_rng(11)
    spent = dict.fromkeys(("streams", "allocate", "places", "decode", "fits", "wait"), 0.0)
    saved = _packed.ALIGN_BYTES
    _packed.ALIGN_BYTES = align
    try:
        for n in range(STAGE_BATCHES + 1):
            idx = rng.choice(len(folder), 256, replace=False)
            sources, sizes = [blobs[i] for i in idx.tolist()], folder.sizes[idx]
            marks = [time.perf_counter()]
            streams = dec._streams(sources, None)
            marks.append(time.perf_counter())
            packed = PackedImages.allocate(sizes, DEV)
            marks.append(time.perf_counter())
            stream = torch.cuda.current_stream(DEV).cuda_stream
            places = dec._as_images([_BufferPart(packed.pointer(i), int(packed.heights[i]),
                                                 int(packed.widths[i]), True) for i in range(len(idx))],
                                    cuda_stream=stream)
            marks.append(time.perf_counter())
            decoded = dec._decoder.decode(streams, images=places, params=dec._packed_params,
                                          cuda_stream=stream)
            marks.append(time.perf_counter())
            assert all(packed.fits(i, image) for i, image in enumerate(decoded))
            marks.append(time.perf_counter())
            torch.cuda.synchronize(DEV)
            marks.append(time.perf_counter())
            if n:  # the first batch warms up
                for key, a, b in zip(spent, marks, marks[1:]):
                    spent[key] += (b - a) * 1e3
    finally:
        _packed.ALIGN_BYTES = saved
    return {key: round(ms / STAGE_BATCHES, 3) for key, ms in spent.items()}


def record(result: dict, key: str, value) -> None:
    result[key] = value
    (Path(os.environ.get("OUT", ".")) / "jpeg_packed_gap_probe.json").write_text(
        json.dumps(result, indent=1))


def main() -> int:
    folder, blobs, batches = probe_folder()
    result: dict = {"files": len(folder), "batch": 256, "batches_per_thread": batches,
                    "seconds_per_row": 3.0}
    table = rows(folder, blobs)
    rng = np.random.default_rng(7)
    plan = [rng.choice(len(folder), 256, replace=False) for _ in range(batches)]
    for round_ in range(1, ROUNDS + 1):
        for label, (dec, decode) in table.items():
            try:
                rate, _ = time_decoders([dec], [plan], decode, DEV)
            except Exception as exc:  # noqa: BLE001 - say what failed, go on
                record(result, f"{label}, round {round_}", {"error": repr(exc)})
                print(f"{label}, round {round_}: {exc!r}", flush=True)
                continue
            record(result, f"{label}, round {round_}", rate)
            print(f"{label + ', round ' + str(round_):46s} {rate:8,.0f} images/s", flush=True)
    for align in (1, 4096, 1, 4096):  # session 27 ran (1, 256, 1, 256)
        spent = stages(folder, blobs, align)
        record(result, f"stages ms/batch, align {align}", spent)
        print(f"stages, align {align:4d} B: " + ", ".join(f"{k} {v:.2f}" for k, v in spent.items())
              + " ms a batch", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
