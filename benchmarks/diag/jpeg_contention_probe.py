"""What slows nvImageCodec's decode inside the GPU JPEG loader? (issue 15). Inside the loader a
lane's ``decode`` call takes 3-6× what it takes alone (session13-6/NOTE.md), and the loader
stays at 6-9k images/s against 12-24k for decoding alone. The loader adds three things beside
a lane's decode; this times the same decode (one thread, vidloader's ``decode_files`` on
256-file batches, each synchronised) alone and beside one of them at a time, on a second
thread:

- ``alone``: nothing else runs;
- ``GIL``: a pure-Python loop that holds the GIL (no GPU, one core): does the decode wait for
  the interpreter (its Python-side calls: ``CodeStream(path)``, ``as_tensor``, the binding)?
- ``GPU kernels``: large matrix products on a stream of their own, a few launches a second
  (the GPU busy, the GIL almost free): does the decode wait for other streams' work (a
  device-wide synchronisation: ``cudaFree``, ``cudaFreeHost``, a synchronous copy)?
- ``CPU threads``: a large CPU matrix product on torch's intra-op threads (all cores busy,
  the GIL released): do nvImageCodec's own CPU threads lack cores?
- ``augment``: the loader's augmentation (``fill_from_images``, 224² random resized crop +
  flip + normalize) looping on decoded batches, as the augmentation thread does.

For each, the decode's images/s and the second thread's own rate (its loops a second).

Usage (on the device): ``python3 benchmarks/diag/jpeg_contention_probe.py [files] [seconds]``;
prints a line per condition and writes ``$OUT/jpeg_contention_probe.json``.
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

from vidloader.bench._images import _rrc_proc
from vidloader.images import ImageFolder
from vidloader.images._nvimgcodec import NvImageCodecDecoder
from vidloader.images._synthetic import write_image_folder
from vidloader.pipeline import ImageLoader
from vidloader.pipeline._image_fill import fill_from_images
from vidloader.sampling import SequentialFrames

BATCH = 256


def _python_loop(stop: threading.Event) -> int:
    n = 0
    while not stop.is_set():
        sum(range(2000))  # ~20 µs holding the GIL, as a run of small Python calls does
        n += 1
    return n


def _gpu_loop(stop: threading.Event) -> int:
    stream = torch.cuda.Stream()
    a = torch.randn(64, 1024, 1024, device="cuda")
    n = 0
    with torch.cuda.stream(stream):
        while not stop.is_set():
            torch.bmm(a, a)  # ~1-2 ms of GPU a launch: the GIL is held a few µs a ms
            n += 1
            if n % 8 == 0:
                stream.synchronize()  # no more than 8 queued
    stream.synchronize()
    return n


def _cpu_loop(stop: threading.Event) -> int:
    a = torch.randn(1024, 1024)
    n = 0
    while not stop.is_set():
        torch.mm(a, a)  # torch's intra-op threads on every core, the GIL released
        n += 1
    return n


def _augment_loop(folder, decoded: list) -> callable:
    # In file order, as the decoded batches: plan b's rows are batch b's files.
    loader = ImageLoader(folder, batch_size=BATCH, processing=_rrc_proc(), device="cuda",
                         decoder="nvimgcodec", sampler=SequentialFrames())
    config = loader.config
    plans = [loader._epoch_plan(0).batch(b % len(loader)) for b in range(len(decoded))]
    slot = torch.empty((BATCH, 3, 224, 224), device="cuda")
    stream = torch.cuda.Stream()

    def loop(stop: threading.Event) -> int:
        n = 0
        with torch.cuda.stream(stream):
            while not stop.is_set():
                plan, images = plans[n % len(plans)], decoded[n % len(decoded)]
                if plan.batch_size == len(images):
                    fill_from_images(config, "nvimgcodec", images, plan, slot[:plan.batch_size])
                n += 1
                if n % 2 == 0:
                    stream.synchronize()  # as the loader: a batch or two ahead at most
        stream.synchronize()
        return n
    loop.loader = loader
    return loop


def _measure(decoder, batches: list, seconds: float, beside=None) -> dict:
    stream = torch.cuda.Stream()
    stop, box = threading.Event(), {}
    thread = None
    def run_beside():
        try:
            box["n"] = beside(stop)
        except Exception as exc:  # noqa: BLE001 - reported in the JSON, the decode still timed
            box["error"] = repr(exc)

    if beside is not None:
        thread = threading.Thread(target=run_beside)
        thread.start()
        time.sleep(0.3)  # the second thread at its pace first
    done, k, start = 0, 0, time.perf_counter()
    calls = []
    while time.perf_counter() - start < seconds:
        t = time.perf_counter()
        with torch.cuda.stream(stream):
            out = decoder.decode_files(batches[k % len(batches)])
        stream.synchronize()
        calls.append(time.perf_counter() - t)
        done += sum(x is not None for x in out)
        k += 1
    elapsed = time.perf_counter() - start
    stop.set()
    if thread is not None:
        thread.join()
    return {"images_per_s": done / elapsed, "ms_per_batch_median": 1e3 * float(np.median(calls)),
            "beside_loops_per_s": box.get("n", 0) / (elapsed + 0.3) if beside else None,
            **({"beside_error": box["error"]} if "error" in box else {})}


def main() -> int:
    files = int(sys.argv[1]) if len(sys.argv) > 1 else 4000
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 4.0
    root = write_image_folder("/tmp/jpeg-contention", num_classes=10, per_class=files // 10)
    folder = ImageFolder(root, progress=False)
    paths = [folder.path(i) for i in range(len(folder))]
    batches = [paths[k:k + BATCH] for k in range(0, len(paths) - BATCH + 1, BATCH)]
    decoder = NvImageCodecDecoder(torch.device("cuda", 0))
    decoder.decode_files(batches[0])  # initialise the backends
    decoded = [decoder.decode_files(b) for b in batches[:4]]
    torch.cuda.synchronize()
    augment = _augment_loop(folder, decoded)
    results: dict = {"files": len(paths), "gpu": torch.cuda.get_device_name(0),
                     "torch_threads": torch.get_num_threads(), "cores": os.cpu_count()}
    conditions = [("alone", None), ("GIL", _python_loop), ("GPU kernels", _gpu_loop),
                  ("CPU threads", _cpu_loop), ("augment", augment), ("alone, again", None)]
    for label, beside in conditions:
        r = results[label] = _measure(decoder, batches, seconds, beside)
        side = ("" if beside is None else f"   beside: {r['beside_loops_per_s']:9.1f} loops/s"
                f" {r.get('beside_error', '')}")
        print(f"{label:14s} {r['images_per_s']:8.0f} images/s  {r['ms_per_batch_median']:6.1f} "
              f"ms/batch{side}", flush=True)
    for label, beside in conditions[1:5]:  # the second thread's pace alone
        stop = threading.Event()
        timer = threading.Timer(2.0, stop.set)
        timer.start()
        start = time.perf_counter()
        n = beside(stop)
        results[f"{label}: alone, loops/s"] = n / (time.perf_counter() - start)
        print(f"{label:14s} alone: {results[f'{label}: alone, loops/s']:9.1f} loops/s", flush=True)
    augment.loader.shutdown()
    out = Path(os.environ.get("OUT", ".")) / "jpeg_contention_probe.json"
    out.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
