"""nvJPEG's hardware decoder called directly (``images/_nvjpeg.py``, session 28) against
nvImageCodec's packed decode, on the decode alone (issue 15).

nvImageCodec retakes the GIL ~2.6 times an image and spends 3.2-4.4 ms a batch around its
decode call (session 27); torchvision's batched ``decode_jpeg`` on CUDA, which calls nvJPEG's
batched hardware decode itself, decoded 20,424 images/s against nvImageCodec's 16,263 in the
same call (``session26-9``). ``NvJpegDecoder.decode_packed`` makes one ``nvjpegDecodeBatched``
call a batch into the packed buffer.

Rows (``_decode_threads.time_decoders``, 3 s each, bytes read beforehand, batches of 256,
three rounds alternated): nvImageCodec's ``decode_packed`` and nvJPEG's, one and two threads;
nvJPEG's with chroma repeated; torchvision's batched ``decode_jpeg`` on CUDA. Then nvJPEG's
``decode_packed`` stage by stage, the share of images its hardware call took, and its pixels
against nvImageCodec's on the same batch.

Usage (on the device): ``python3 benchmarks/diag/nvjpeg_probe.py [images] [batches]``;
prints a line per row and writes ``$OUT/nvjpeg_probe.json`` after each.
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

from vidloader.images._nvimgcodec import NvImageCodecDecoder
from vidloader.images._nvjpeg import NvJpegDecoder, hardware_decodes, jpeg_header, library_version
from vidloader.images._packed import PackedImages

DEV = torch.device("cuda", 0)
ROUNDS = 3
STAGE_BATCHES = 40


def record(result: dict, key: str, value) -> None:
    result[key] = value
    (Path(os.environ.get("OUT", ".")) / "nvjpeg_probe.json").write_text(json.dumps(result, indent=1))


def rows(folder, blobs) -> dict:
    from torchvision.io import decode_jpeg

    tensors = {i: torch.frombuffer(bytearray(b), dtype=torch.uint8) for i, b in blobs.items()}

    def packed(dec, idx):
        return dec.decode_packed([blobs[i] for i in idx.tolist()], folder.sizes[idx])

    def torchvision(dec, idx):
        return decode_jpeg([tensors[i] for i in idx.tolist()], device=DEV)

    return {
        "nvimgcodec decode_packed, 1 thread": ([NvImageCodecDecoder(DEV)], packed),
        "nvjpeg decode_packed, 1 thread": ([NvJpegDecoder(DEV)], packed),
        "nvimgcodec decode_packed, 2 threads": ([NvImageCodecDecoder(DEV) for _ in range(2)], packed),
        "nvjpeg decode_packed, 2 threads": ([NvJpegDecoder(DEV) for _ in range(2)], packed),
        "nvjpeg decode_packed, chroma repeated": ([NvJpegDecoder(DEV, fancy_upsampling=False)], packed),
        "torchvision decode_jpeg (batched, CUDA)": ([None], torchvision),
    }


def stages(folder, blobs) -> dict:
    """Mean ms a batch in each stage of nvJPEG's ``decode_packed`` (its code, step by step)."""
    dec = NvJpegDecoder(DEV)
    rng = np.random.default_rng(11)
    spent = dict.fromkeys(("headers", "allocate", "decode call", "wait"), 0.0)
    taken = 0
    for n in range(STAGE_BATCHES + 1):
        idx = rng.choice(len(folder), 256, replace=False)
        sources, sizes = [blobs[i] for i in idx.tolist()], folder.sizes[idx]
        marks = [time.perf_counter()]
        headers = [jpeg_header(b) for b in sources]
        rows_hw = [k for k, h in enumerate(headers) if hardware_decodes(h, tuple(sizes[k]))]
        marks.append(time.perf_counter())
        packed = PackedImages.allocate(sizes, DEV)
        marks.append(time.perf_counter())
        assert dec._decode_hardware(packed, sources, rows_hw)
        marks.append(time.perf_counter())
        torch.cuda.synchronize(DEV)
        marks.append(time.perf_counter())
        if n:  # the first batch warms up
            taken += len(rows_hw)
            for key, a, b in zip(spent, marks, marks[1:]):
                spent[key] += (b - a) * 1e3
    out = {key: round(ms / STAGE_BATCHES, 3) for key, ms in spent.items()}
    out["hardware share"] = round(taken / (256 * STAGE_BATCHES), 4)
    return out


def agreement(folder, blobs) -> dict:
    """nvJPEG's pixels against nvImageCodec's on one batch (both interpolate chroma)."""
    idx = np.random.default_rng(3).choice(len(folder), 256, replace=False)
    sources, sizes = [blobs[i] for i in idx.tolist()], folder.sizes[idx]
    ours = NvJpegDecoder(DEV).decode_packed(sources, sizes)
    theirs = NvImageCodecDecoder(DEV).decode_packed(sources, sizes)
    torch.cuda.synchronize(DEV)
    diffs = [(a.int() - b.int()).abs() for a, b in zip(ours, theirs)]
    return {"mean": round(float(np.mean([d.float().mean().item() for d in diffs])), 4),
            "max": int(max(d.max().item() for d in diffs)),
            "images identical": sum(int(d.max().item() == 0) for d in diffs)}


def main() -> int:
    folder, blobs, batches = probe_folder()
    result: dict = {"files": len(folder), "batch": 256, "batches_per_thread": batches,
                    "seconds_per_row": 3.0, "libnvjpeg": library_version()}
    print("libnvjpeg", result["libnvjpeg"], flush=True)
    record(result, "agreement with nvimgcodec", agreement(folder, blobs))
    print("agreement with nvimgcodec:", result["agreement with nvimgcodec"], flush=True)
    table = rows(folder, blobs)
    rng = np.random.default_rng(7)
    for round_ in range(1, ROUNDS + 1):
        for label, (decoders, decode) in table.items():
            plans = [[rng.choice(len(folder), 256, replace=False) for _ in range(batches)]
                     for _ in decoders]
            try:
                rate, each = time_decoders(decoders, plans, decode, DEV)
            except Exception as exc:  # noqa: BLE001 - say what failed, go on
                record(result, f"{label}, round {round_}", {"error": repr(exc)})
                print(f"{label}, round {round_}: {exc!r}", flush=True)
                continue
            record(result, f"{label}, round {round_}", rate)
            print(f"{label + ', round ' + str(round_):52s} {rate:8,.0f} images/s", flush=True)
    for k in (1, 2):
        spent = stages(folder, blobs)
        record(result, f"nvjpeg stages ms/batch, {k}", spent)
        print("nvjpeg stages: " + ", ".join(f"{key} {v}" for key, v in spent.items()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
