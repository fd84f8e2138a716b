"""nvJPEG's hardware decode alone, its bitstreams in pageable or page-locked memory, its
states set up ahead (``nvjpegDecodeBatchedPreAllocate``) or not (issue 15; session 30).

Session 30's first timeline (H200, 3 lanes) had nvJPEG's batched call at 13-15 ms a batch of
256 and two calls at once only 13-32% of the time. DALI copies the bitstreams into a pinned
staging buffer before its hardware call (unless they are pinned already) and calls
``nvjpegDecodeBatchedPreAllocate``; vidloader's lanes hand nvJPEG views of the readers'
pageable shared memory. Here each variant decodes the same batches, every batch's files in
one buffer as the readers lay them out, on 1 and on 3 threads (each its own decoder and
stream), 3 s a row, two rounds alternated; reported: images/s, and per call its wall and
its thread's CPU milliseconds (CPU close to wall: the call is work on the host, not a wait
for the engines). The pinned variant's pixels are checked equal to the pageable one's.

Usage (on the device): ``python3 benchmarks/diag/nvjpeg_input_probe.py [seconds]``; writes
``$OUT/nvjpeg_input_probe.json``.
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

from vidloader.images import ImageFolder, _nvjpeg
from vidloader.images._jpeg_header import header_facts
from vidloader.images._synthetic import write_image_folder
from vidloader.pipeline._page_lock import pin_host_memory

BATCH, BATCHES = 256, 12


def slabs(folder, pinned: bool):
    """``BATCHES`` batches: (buffer, views, sizes, facts), the files of each in one buffer."""
    rng = np.random.default_rng(0)
    out, unpins = [], []
    for _ in range(BATCHES):
        rows = rng.choice(len(folder), BATCH, replace=False)
        blobs = [Path(folder.path(int(r))).read_bytes() for r in rows]
        buffer = np.zeros(sum(len(b) for b in blobs) + 4096, np.uint8)
        views, at = [], 0
        for b in blobs:
            buffer[at:at + len(b)] = np.frombuffer(b, np.uint8)
            views.append(buffer[at:at + len(b)])
            at += len(b)
        if pinned:
            unpin = pin_host_memory(buffer, torch.device("cuda", 0))
            assert unpin is not None, "cudaHostRegister refused"
            unpins.append(unpin)
        facts = np.stack([header_facts(v) for v in views])
        out.append((buffer, views, folder.sizes[rows], facts))
    return out, unpins


def run(decoders, batches, seconds: float) -> dict:
    """Each decoder on its own thread and stream, through ``batches`` over and over."""
    counts, walls, cpus = [0] * len(decoders), [], []
    lock = threading.Lock()
    stop = time.perf_counter() + seconds

    def loop(k: int) -> None:
        dec, stream, n = decoders[k], torch.cuda.Stream(), 0
        with torch.cuda.stream(stream):
            while time.perf_counter() < stop:
                _, views, sizes, facts = batches[(n + 3 * k) % len(batches)]
                w0, c0 = time.perf_counter(), time.thread_time()
                dec.decode_packed(views, sizes, header_facts=facts)
                w, c = time.perf_counter() - w0, time.thread_time() - c0
                with lock:
                    walls.append(w)
                    cpus.append(c)
                counts[k] += BATCH
                n += 1
            stream.synchronize()

    t0 = time.perf_counter()
    threads = [threading.Thread(target=loop, args=(k,)) for k in range(len(decoders))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    torch.cuda.synchronize()
    span = time.perf_counter() - t0
    return {"images_per_s": round(sum(counts) / span), "call_wall_ms": round(1e3 * float(np.mean(walls)), 2),
            "call_cpu_ms": round(1e3 * float(np.mean(cpus)), 2), "calls": len(walls),
            "hardware_share": round(sum(d.hardware_decoded for d in decoders)
                                    / max(1, sum(d.hardware_decoded + d.handed_on for d in decoders)), 3)}


def main() -> int:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 3.0
    folder = ImageFolder(write_image_folder("/tmp/jpeg-ab-x1", num_classes=10, per_class=400),
                         progress=False)
    device = torch.device("cuda", 0)
    inputs = {False: slabs(folder, False)[0], True: slabs(folder, True)[0]}
    results: dict = {"batch": BATCH, "batches": BATCHES, "seconds": seconds}
    # the same pixels from pinned and pageable bitstreams
    dec = _nvjpeg.NvJpegDecoder(device)
    a = dec.decode_packed(inputs[False][0][1], inputs[False][0][2], header_facts=inputs[False][0][3])
    b = dec.decode_packed(inputs[True][0][1], inputs[True][0][2], header_facts=inputs[True][0][3])
    torch.cuda.synchronize()
    results["pinned pixels equal pageable"] = bool(torch.equal(a.pixels, b.pixels))
    print("pinned pixels equal pageable:", results["pinned pixels equal pageable"], flush=True)
    variants = [(pinned, prealloc, threads) for threads in (1, 3) for prealloc in (256, 0)
                for pinned in (False, True)]
    out = Path(os.environ.get("OUT", ".")) / "nvjpeg_input_probe.json"
    for round_ in (1, 2):
        for pinned, prealloc, threads in (variants if round_ == 1 else variants[::-1]):
            _nvjpeg.PREALLOCATE_IMAGES = prealloc
            decoders = [_nvjpeg.NvJpegDecoder(device) for _ in range(threads)]
            run(decoders, inputs[pinned], 0.5)  # warm-up
            for d in decoders:
                d.hardware_decoded = d.handed_on = 0
            row = run(decoders, inputs[pinned], seconds)
            row["preallocated"] = all(d.preallocated for d in decoders)
            label = (f"{threads} thread(s), {'pinned' if pinned else 'pageable'}, "
                     f"preallocate {prealloc}, round {round_}")
            results[label] = row
            print(f"{label}: {json.dumps(row)}", flush=True)
            for d in decoders:
                d.close()
            out.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
