"""Does nvImageCodec feed the hardware JPEG decoder faster with other options? (issue 15)

Session 19 found the H200's JPEG engines ~23% busy whatever the number of worker processes
(``benchmarks/results/gpu/session19-4/NOTE.md``). This times nvImageCodec's decode alone (one
process, batches of 256 generated ~500×375 JPEGs read beforehand, each batch synchronised),
beside ``nvidia-smi dmon``'s JPEG-engine share, for decoder option strings (nvImageCodec's
``Decoder(options=...)``; the hardware decoder's are ``nvjpeg_hw_decoder:preallocate_*``), for
batches of 256 and 1024, and for 2 threads each with its own decoder.

Usage (on the device): ``python3 benchmarks/diag/jpeg_hw_options_probe.py [seconds]``; writes
``$OUT/jpeg_hw_options_probe.json``.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path

from jpeg_budget_probe import FOLDER, Dmon  # this folder: the script's own

HW = "nvjpeg_hw_decoder"
OPTIONS = {
    "default": "",
    "preallocate 256 of 500x500": f"{HW}:preallocate_width_hint=500 {HW}:preallocate_height_hint=500 "
                                  f"{HW}:preallocate_batch_size=256 {HW}:preallocate_buffers=1",
    "4 CUDA streams": ":num_cuda_streams=4",
}


def _decoder(options: str):
    import nvidia.nvimgcodec as nv

    backends = [nv.Backend(getattr(nv.BackendKind, k), load_hint=1.0)
                for k in ("HW_GPU_ONLY", "GPU_ONLY", "HYBRID_CPU_GPU", "CPU_ONLY")]
    return nv.Decoder(device_id=0, backends=backends, options=options)


def _run(options: str, batch: int, threads: int, blobs: list, seconds: float) -> dict:
    import nvidia.nvimgcodec as nv
    import torch

    decoders = [_decoder(options) for _ in range(threads)]
    counts = [0] * threads
    stop = threading.Event()

    def loop(t):
        stream = torch.cuda.Stream()
        k = t
        while not stop.is_set():
            chunk = [nv.CodeStream(blobs[(k * batch + j) % len(blobs)]) for j in range(batch)]
            images = decoders[t].decode(chunk, cuda_stream=stream.cuda_stream)
            stream.synchronize()
            counts[t] += sum(x is not None for x in images)
            k += threads
    for t in range(threads):  # warm-up
        decoders[t].decode([nv.CodeStream(b) for b in blobs[:batch]])
    torch.cuda.synchronize()
    dmon = Dmon()
    workers = [threading.Thread(target=loop, args=(t,)) for t in range(threads)]
    start = time.perf_counter()
    for w in workers:
        w.start()
    time.sleep(seconds)
    stop.set()
    for w in workers:
        w.join()
    elapsed = time.perf_counter() - start
    return {"images_per_s": round(sum(counts) / elapsed, 1), "dmon": dmon.stop()}


def main() -> int:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 5.0
    from vidloader.images import ImageFolder
    from vidloader.images._synthetic import write_image_folder

    write_image_folder(FOLDER, num_classes=10, per_class=200, copies=1)
    folder = ImageFolder(FOLDER, progress=False)
    blobs = [Path(folder.path(i)).read_bytes() for i in range(len(folder))]
    rows = []
    for label, options in OPTIONS.items():
        for batch, threads in ((256, 1), (1024, 1), (256, 2)):
            try:
                row = _run(options, batch, threads, blobs, seconds)
            except Exception as exc:  # noqa: BLE001 - an option nvImageCodec refuses
                row = {"error": repr(exc)[:300]}
            row = {"options": label, "batch": batch, "threads": threads, **row}
            rows.append(row)
            print(json.dumps(row), flush=True)
    Path(os.environ.get("OUT", "."), "jpeg_hw_options_probe.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
