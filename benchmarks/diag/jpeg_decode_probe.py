"""How fast can one GPU decode JPEGs, and how must it be fed (issue 15)? Decode alone, files
read into memory beforehand, every variant on the same generated ImageNet-like JPEGs
(500×375, quality 90) in one process, so the figures compare.

Variants: nvImageCodec with the hardware backend alone, CUDA (hybrid) alone, vidloader's
backend list, its default list; batch 256 and 1024; one, two and four threads each with its
own decoder and CUDA stream; torchvision's batched ``decode_jpeg`` on CUDA on one and two
threads; and the hardware decoder and torchvision's CUDA decoder side by side on two threads,
each taking a share of every batch.

Usage (on the device): ``python3 benchmarks/diag/jpeg_decode_probe.py [files] [seconds]``;
prints a line per variant and writes ``$OUT/jpeg_decode_probe.json``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

from vidloader.images import ImageFolder
from vidloader.images._synthetic import write_image_folder


def _blobs(files: int) -> list[bytes]:
    root = write_image_folder("/tmp/jpeg-probe", num_classes=10, per_class=files // 10)
    folder = ImageFolder(root)
    return [Path(folder.path(i)).read_bytes() for i in range(len(folder))]


def _nv_decoder(kind_names: list[tuple[str, float]] | None, threads: int | None = None):
    from nvidia import nvimgcodec

    kwargs = {"device_id": 0}
    if kind_names is not None:
        kwargs["backends"] = [nvimgcodec.Backend(getattr(nvimgcodec.BackendKind, k), load_hint=h)
                              for k, h in kind_names]
    if threads is not None:
        kwargs["max_num_cpu_threads"] = threads
    decoder = nvimgcodec.Decoder(**kwargs)
    params = nvimgcodec.DecodeParams(apply_exif_orientation=True, allow_any_depth=False,
                                     color_spec=nvimgcodec.ColorSpec.SRGB)
    stream = torch.cuda.Stream()

    def decode(blobs):
        with torch.cuda.stream(stream):
            streams = [nvimgcodec.CodeStream(b) for b in blobs]
            images = decoder.decode(streams, params=params, cuda_stream=stream.cuda_stream)
            out = [torch.as_tensor(i, device="cuda") for i in images if i is not None]
        stream.synchronize()
        return len(out)
    return decode


def _tv_decoder():
    from torchvision.io import decode_jpeg

    stream = torch.cuda.Stream()

    def decode(blobs):
        tensors = [torch.frombuffer(bytearray(b), dtype=torch.uint8) for b in blobs]
        with torch.cuda.stream(stream):
            out = decode_jpeg(tensors, device="cuda")
        stream.synchronize()
        return len(out)
    return decode


def _split(first, second, share: float):
    """``first`` decodes ``share`` of each batch while ``second`` decodes the rest, at once."""
    pool = ThreadPoolExecutor(2)

    def decode(blobs):
        cut = int(len(blobs) * share)
        a = pool.submit(first, blobs[:cut])
        b = pool.submit(second, blobs[cut:])
        return a.result() + b.result()
    return decode


def _rate(make, blobs, batch: int, seconds: float, threads: int = 1) -> dict:
    """Images/s of ``threads`` threads, each with its own ``make()`` decoder, taking batches
    in turn for ``seconds`` after a warm-up batch each."""
    decoders = [make() for _ in range(threads)]
    batches = [blobs[(k * batch) % len(blobs):][:batch] for k in range(len(blobs) // batch)]
    for d in decoders:
        d(batches[0])
    done = [0] * threads
    stop = time.perf_counter() + seconds

    def loop(t):
        k = t
        while time.perf_counter() < stop:
            done[t] += decoders[t](batches[k % len(batches)])
            k += threads
    start = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(loop, range(threads)))
    elapsed = time.perf_counter() - start
    return {"images": sum(done), "seconds": elapsed, "images_per_s": sum(done) / elapsed,
            "batch": batch, "threads": threads}


def main() -> int:
    files = int(sys.argv[1]) if len(sys.argv) > 1 else 4000
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 4.0
    blobs = _blobs(files)
    print(f"{len(blobs)} files, mean {sum(map(len, blobs)) / len(blobs) / 1e3:.1f} KB", flush=True)
    hw = [("HW_GPU_ONLY", 1.0)]
    ours = [("HW_GPU_ONLY", 1.0), ("GPU_ONLY", 1.0), ("HYBRID_CPU_GPU", 1.0), ("CPU_ONLY", 1.0)]
    variants = {
        "nv hw only, b256": (lambda: _nv_decoder(hw), 256, 1),
        "nv ours, b256": (lambda: _nv_decoder(ours), 256, 1),
        "nv default, b256": (lambda: _nv_decoder(None), 256, 1),
        "nv cuda only, b256": (lambda: _nv_decoder([("GPU_ONLY", 1.0)]), 256, 1),
        "nv hw only, b1024": (lambda: _nv_decoder(hw), 1024, 1),
        "nv hw only, b256, 2 threads": (lambda: _nv_decoder(hw), 256, 2),
        "nv hw only, b256, 4 threads": (lambda: _nv_decoder(hw), 256, 4),
        "nv hw only, b128, 4 threads": (lambda: _nv_decoder(hw), 128, 4),
        "nv hw only, b256, cpu threads 16": (lambda: _nv_decoder(hw, 16), 256, 1),
        "nv hw 0.7 + cuda, b256": (lambda: _nv_decoder([("HW_GPU_ONLY", 0.7), ("GPU_ONLY", 1.0)]), 256, 1),
        "nv hw 0.7 + cuda, b256, 2 threads": (lambda: _nv_decoder([("HW_GPU_ONLY", 0.7), ("GPU_ONLY", 1.0)]), 256, 2),
        "torchvision cuda, b256": (_tv_decoder, 256, 1),
        "torchvision cuda, b256, 2 threads": (_tv_decoder, 256, 2),
        "split nv hw 0.7 | torchvision, b256": (lambda: _split(_nv_decoder(hw), _tv_decoder(), 0.7), 256, 1),
        "split nv hw 0.6 | torchvision, b256": (lambda: _split(_nv_decoder(hw), _tv_decoder(), 0.6), 256, 1),
        "split nv hw 0.7 | torchvision, b256, 2 threads": (lambda: _split(_nv_decoder(hw), _tv_decoder(), 0.7), 256, 2),
    }
    only = os.environ.get("PROBE_ONLY")
    results = {"files": len(blobs), "gpu": torch.cuda.get_device_name(0)}
    for name, (make, batch, threads) in variants.items():
        if only and only not in name:
            continue
        try:
            results[name] = _rate(make, blobs, batch, seconds, threads)
            print(f"{name:<48} {results[name]['images_per_s']:>10,.0f} images/s", flush=True)
        except Exception as exc:  # noqa: BLE001 - one variant failing must not stop the others
            results[name] = {"error": f"{type(exc).__name__}: {exc}"}
            print(f"{name:<48} {results[name]['error']}", flush=True)
    out = Path(os.environ.get("OUT", ".")) / "jpeg_decode_probe.json"
    out.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
