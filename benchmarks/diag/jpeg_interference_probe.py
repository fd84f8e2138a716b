"""What slows nvImageCodec's decode inside the loader (issue 15; session 27).

The loader's timeline (``session27-7``, H200) had a decode call under way 83-93% of the
time, yet each call took 19-24 ms a batch of 256 with one lane, against ~12 ms alone
(``session27-2``'s stage times): something beside the decode slows it. Candidates: the
augmentation's GPU kernels (session 17 saw the decode 8x slower beside matrix products on
another stream), the GIL the augmentation thread holds while it launches them, the reader
processes' reads.

Rows: the hardware decode alone (``decode_packed``, bytes read beforehand, one thread, 3 s,
``_decode_threads.time_decoders``) and beside a load thread on its own CUDA stream:

- ``augment``: the loader's batched crop/resize/flip/normalize (``crop_resize_matmul``, 224²
  random resized crops, float32 CHW) of one decoded batch, over and over, synchronised each;
- ``augment at low priority``: the same on a stream of the lowest priority, the decode's at
  the highest;
- ``python``: a pure-Python loop (the GIL only, no GPU);
- ``gpu``: float16 4096² matrix products, 8 a synchronisation (the GPU only, little GIL).

Three rounds alternated; each load row also gives the load's own pace. ``PROBE_ROWS``
(comma-separated labels) keeps only those rows; ``PROBE_SWITCH`` sets the GIL's switch
interval in seconds (Python's default 0.005).

Usage (on the device): ``python3 benchmarks/diag/jpeg_interference_probe.py [images] [batches]``;
writes ``$OUT/jpeg_interference_probe.json`` after each row.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path

import numpy as np
import torch
from _decode_threads import hw_decoder, probe_folder, time_decoders

from vidloader.bench._images import _rrc_proc
from vidloader.images._augment import sample_windows
from vidloader.images._batched import crop_resize_matmul

DEV = torch.device("cuda", 0)
ROUNDS = int(os.environ.get("PROBE_ROUNDS", "3"))


def augment_load(packed, priority: int = 0):
    proc = _rrc_proc()
    out = torch.empty((len(packed), 3, 224, 224), dtype=torch.float32, device=DEV)
    stream = torch.cuda.Stream(DEV, priority=priority)
    rng = np.random.default_rng(3)

    def step():
        windows = sample_windows(proc, packed.heights, packed.widths,
                                 rng.integers(0, 2**62, len(packed)))
        with torch.cuda.stream(stream):
            crop_resize_matmul(packed, windows, (224, 224), proc=proc, out=out)
        stream.synchronize()
    return step


def python_load():
    def step():
        total = 0
        for i in range(200_000):
            total += i * i
    return step


def gpu_load():
    a = torch.randn(4096, 4096, device=DEV, dtype=torch.float16)
    stream = torch.cuda.Stream(DEV)

    def step():
        with torch.cuda.stream(stream):
            for _ in range(8):
                torch.mm(a, a)
        stream.synchronize()
    return step


def beside(step, measure):
    """``measure()`` while a thread runs ``step`` over and over; (its result, load steps/s)."""
    stop, count = threading.Event(), [0]

    def loop():
        while not stop.is_set():
            step()
            count[0] += 1
    thread = threading.Thread(target=loop)
    t0 = time.perf_counter()
    thread.start()
    try:
        result = measure()
    finally:
        stop.set()
        thread.join()
    return result, count[0] / (time.perf_counter() - t0)


def main() -> int:
    folder, blobs, batches = probe_folder()
    rng = np.random.default_rng(7)
    plan = [rng.choice(len(folder), 256, replace=False) for _ in range(batches)]
    dec = hw_decoder(DEV)
    decode = lambda d, idx: d.decode_packed([blobs[i] for i in idx.tolist()], folder.sizes[idx])  # noqa: E731
    packed = dec.decode_packed([blobs[i] for i in plan[0].tolist()], folder.sizes[plan[0]])
    torch.cuda.synchronize(DEV)
    high = -1  # CUDA: lower is sooner; -1 is high on current GPUs (0 the default and lowest)
    loads = {"alone": None, "augment": augment_load(packed), "augment at low priority": None,
             "python": python_load(), "gpu": gpu_load()}
    if os.environ.get("PROBE_ROWS"):
        keep = os.environ["PROBE_ROWS"].split(",")
        loads = {label: step for label, step in loads.items() if label in keep}
    if os.environ.get("PROBE_SWITCH"):
        sys.setswitchinterval(float(os.environ["PROBE_SWITCH"]))
    result: dict = {"files": len(folder), "batch": 256, "seconds_per_row": 3.0,
                    "switch_interval_s": sys.getswitchinterval()}
    name = f"jpeg_interference_probe{os.environ.get('PROBE_TAG', '')}.json"
    out = Path(os.environ.get("OUT", ".")) / name
    for round_ in range(1, ROUNDS + 1):
        order = list(loads) if round_ % 2 else list(loads)[::-1]
        for label in order:
            step = loads[label]
            try:
                if label == "alone":
                    rate, load = time_decoders([dec], [plan], decode, DEV)[0], None
                elif label == "augment at low priority":
                    step = augment_load(packed, priority=0)  # CUDA: 0 is the lowest priority
                    measure = lambda: time_decoders([dec], [plan], decode, DEV, priority=high)[0]  # noqa: E731
                    rate, load = beside(step, measure)
                else:
                    rate, load = beside(step, lambda: time_decoders([dec], [plan], decode, DEV)[0])
            except Exception as exc:  # noqa: BLE001 - say what failed, go on
                result[f"{label}, round {round_}"] = {"error": repr(exc)}
                print(f"{label}, round {round_}: {exc!r}", flush=True)
                continue
            result[f"{label}, round {round_}"] = {"decode_images_per_s": rate, "load_steps_per_s": load}
            out.write_text(json.dumps(result, indent=1))
            extra = f"  (load {load:,.1f} steps/s)" if load is not None else ""
            print(f"{label + ', round ' + str(round_):36s} {rate:8,.0f} images/s{extra}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
