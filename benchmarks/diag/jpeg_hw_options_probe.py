"""Does nvImageCodec feed the hardware JPEG decoder faster with other options? (issue 15)

Session 19 found the H200's JPEG engines ~23% busy whatever the number of worker processes
(``benchmarks/results/gpu/session19-4/NOTE.md``). This times nvImageCodec's decode alone (one
process, batches of 256 generated ~500×375 JPEGs read beforehand, each batch synchronised),
beside ``nvidia-smi dmon``'s JPEG-engine share, for decoder option strings (nvImageCodec's
``Decoder(options=...)``; the hardware decoder's are ``nvjpeg_hw_decoder:preallocate_*``), for
batches of 256 and 1024, and for 2 threads each with its own decoder.

With ``--steps``, instead: two decode threads (batches of 256) through each step between that
decode and the split pool's decoding process (``pipeline/_image_split_workers.py``): nvImageCodec
on bytes with its default parameters; vidloader's decoder (EXIF orientation, sRGB) on bytes; on
paths (``decode_files``); on paths with each batch packed into an arena by one ``torch.cat``.

Usage (on the device): ``python3 benchmarks/diag/jpeg_hw_options_probe.py [seconds] [--steps]``;
writes ``$OUT/jpeg_hw_options_probe.json``.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path

from jpeg_budget_probe import FOLDER, Dmon, _cpu_ticks  # this folder: the script's own

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
    for decoder in decoders:  # warm-up
        decoder.decode([nv.CodeStream(b) for b in blobs[:batch]])
    torch.cuda.synchronize()

    def call(decoder, k, t):
        chunk = [nv.CodeStream(blobs[(k * batch + j) % len(blobs)]) for j in range(batch)]
        return decoder.decode(chunk, cuda_stream=torch.cuda.current_stream().cuda_stream)
    return _decode_threads(call, decoders, seconds)


def _steps(blobs: list, paths: list, seconds: float) -> list:
    """images/s, JPEG-engine share and cores busy of two decode threads for each step."""
    import nvidia.nvimgcodec as nv
    import torch

    from vidloader.images._nvimgcodec import NvImageCodecDecoder

    arena = torch.empty(2 * 256 * 500 * 500 * 3, dtype=torch.uint8, device="cuda")

    def raw(dec, k):
        return dec.decode([nv.CodeStream(b) for b in blobs[k * 256 % len(blobs):][:256]])

    def ours_bytes(dec, k):
        return dec.decode(blobs[k * 256 % len(blobs):][:256])

    def ours_files(dec, k):
        return dec.decode_files(paths[k * 256 % len(paths):][:256])

    def packed(dec, k, t):
        images = ours_files(dec, k)
        kept = [x.reshape(-1) for x in images if x is not None]
        base = t * 256 * 500 * 500 * 3
        torch.cat(kept, out=arena[base:base + sum(x.numel() for x in kept)])
        return images

    def ours(**params):
        def make():
            dec = NvImageCodecDecoder(torch.device("cuda", 0))
            colors = nv.ColorSpec
            dec._params = nv.DecodeParams(
                apply_exif_orientation=params.get("exif", True),
                color_spec=colors.SRGB if params.get("srgb", True) else colors.RGB,
                allow_any_depth=False)
            return dec
        return make

    if "--params" in sys.argv:
        steps = {"nvimgcodec on bytes, default parameters": (lambda: _decoder(""), raw),
                 "vidloader's decoder on bytes": (ours(), ours_bytes),
                 "on bytes, no EXIF orientation": (ours(exif=False), ours_bytes),
                 "on bytes, RGB not sRGB": (ours(srgb=False), ours_bytes),
                 "on bytes, neither": (ours(exif=False, srgb=False), ours_bytes),
                 "on paths, neither": (ours(exif=False, srgb=False), ours_files)}
    else:
        steps = {}
    steps = steps or {"nvimgcodec on bytes, default parameters": (lambda: _decoder(""), raw),
             "vidloader's decoder on bytes": (lambda: NvImageCodecDecoder(torch.device("cuda", 0)), ours_bytes),
             "vidloader's decoder on paths": (lambda: NvImageCodecDecoder(torch.device("cuda", 0)), ours_files),
             "on paths, packed into an arena": (lambda: NvImageCodecDecoder(torch.device("cuda", 0)), packed)}
    rows = []
    for label, (make, step) in steps.items():
        call = (lambda dec, k, t, f=step: f(dec, k, t)) if step is packed else (
            lambda dec, k, t, f=step: f(dec, k))
        row = {"step": label, **_decode_threads(call, [make(), make()], seconds)}
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def _decode_threads(call, decoders: list, seconds: float) -> dict:
    """images/s, cores busy and ``dmon`` shares of ``call(decoder, batch, thread)`` looping on
    a thread per decoder (a CUDA stream each, each batch synchronised) for ``seconds``."""
    import torch

    n = len(decoders)
    counts, stop = [0] * n, threading.Event()

    def loop(t):
        stream = torch.cuda.Stream()
        k = t
        with torch.cuda.stream(stream):
            while not stop.is_set():
                images = call(decoders[t], k, t)
                stream.synchronize()
                counts[t] += sum(x is not None for x in images)
                k += n
    busy0, _ = _cpu_ticks()
    dmon = Dmon()
    threads = [threading.Thread(target=loop, args=(t,)) for t in range(n)]
    start = time.perf_counter()
    for th in threads:
        th.start()
    time.sleep(seconds)
    stop.set()
    for th in threads:
        th.join()
    elapsed = time.perf_counter() - start
    busy = (_cpu_ticks()[0] - busy0) / os.sysconf("SC_CLK_TCK")
    return {"images_per_s": round(sum(counts) / elapsed, 1), "cores_busy": round(busy / elapsed, 1),
            "dmon": dmon.stop()}


def main() -> int:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 5.0
    from vidloader.images import ImageFolder
    from vidloader.images._synthetic import write_image_folder

    write_image_folder(FOLDER, num_classes=10, per_class=200, copies=1)
    folder = ImageFolder(FOLDER, progress=False)
    blobs = [Path(folder.path(i)).read_bytes() for i in range(len(folder))]
    if "--steps" in sys.argv:
        rows = _steps(blobs, [folder.path(i) for i in range(len(folder))], seconds)
        Path(os.environ.get("OUT", "."), "jpeg_decode_steps.json").write_text(json.dumps(rows, indent=1))
        return 0
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
