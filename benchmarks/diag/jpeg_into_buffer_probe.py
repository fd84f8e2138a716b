"""Can nvImageCodec decode a batch straight into one flat CUDA buffer, and what does that save?
(issue 15, session 25).

Session 25's first call profiled the in-process pool: its augmentation thread spends 24% of its
time in ``torch.as_tensor`` on nvImageCodec's images (one a file) and more in the ``torch.cat``
that packs them. nvImageCodec 0.9 decodes into given images (``decode(..., images=)``), and
``as_images`` wraps external buffers; with ``DecodeParams(sample_format=I_RGB)`` every image
comes out with three channels, so each file's place in a flat buffer follows from the index's
upright sizes. This probe checks, on the GPU:

1. pixels: decoding into views of a flat buffer gives the same pixels as the decoder's own
   images (regular, gray, CMYK, progressive, EXIF-rotated JPEGs), in place (same pointers);
2. the per-image costs of ``torch.as_tensor``, ``torch.from_dlpack`` and one ``as_images``;
3. one thread's decode rate: as now (decode + ``as_tensor`` + ``cat``), into the flat buffer,
   and the decode alone.

Usage (on the device): ``python3 benchmarks/diag/jpeg_into_buffer_probe.py [images] [batches]``;
writes ``$OUT/jpeg_into_buffer_probe.json``.
"""

from __future__ import annotations

import io
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from vidloader.images import ImageFolder
from vidloader.images._nvimgcodec import NvImageCodecDecoder
from vidloader.images._synthetic import natural_like, write_image_folder

DEV = torch.device("cuda", 0)


def special_files(root: Path) -> list[str]:
    """Gray, CMYK, progressive and EXIF-rotated (orientation 6) JPEGs, 500×375 stored."""
    rng = np.random.default_rng(1)
    folder = root / "special"
    folder.mkdir(parents=True, exist_ok=True)
    rgb = Image.fromarray(natural_like(375, 500, rng))
    out = {}
    out["gray.jpg"] = (rgb.convert("L"), {})
    out["cmyk.jpg"] = (rgb.convert("CMYK"), {})
    out["progressive.jpg"] = (rgb, {"progressive": True})
    exif = Image.Exif()
    exif[0x0112] = 6
    out["exif6.jpg"] = (rgb, {"exif": exif.tobytes()})
    out["q75_444.jpg"] = (rgb, {"quality": 75, "subsampling": 0})
    for name, (image, options) in out.items():
        buf = io.BytesIO()
        image.save(buf, "JPEG", quality=options.pop("quality", 90), **options)
        (folder / name).write_bytes(buf.getvalue())
    return [str(folder / name) for name in out]


def upright_sizes(paths: list[str]) -> np.ndarray:
    sizes = []
    for p in paths:
        with Image.open(p) as im:
            w, h = im.size
            orientation = im.getexif().get(0x0112, 1)
        sizes.append((w, h) if orientation in (5, 6, 7, 8) else (h, w))
    return np.array(sizes, np.int64)


class Flat:
    """Decodes a batch into one flat uint8 CUDA buffer at offsets from the upright sizes."""

    def __init__(self, decoder: NvImageCodecDecoder) -> None:
        import nvidia.nvimgcodec as nv

        self.nv, self.decoder = nv, decoder
        self.params = nv.DecodeParams(apply_exif_orientation=True, color_spec=nv.ColorSpec.SRGB,
                                      allow_any_depth=False, sample_format=nv.SampleFormat.I_RGB)
        self.buffer = torch.empty(0, dtype=torch.uint8, device=DEV)

    def views(self, sizes: np.ndarray):
        counts = sizes[:, 0] * sizes[:, 1] * 3
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
        total = int(counts.sum()) + 3  # a zero pixel at the end, for the gather's padding
        if self.buffer.numel() < total:
            self.buffer = torch.empty(int(total * 1.25), dtype=torch.uint8, device=DEV)
        views = [self.buffer[s:s + c].view(h, w, 3) for s, c, (h, w) in
                 zip(starts.tolist(), counts.tolist(), sizes.tolist())]
        return views, starts

    def decode(self, streams, sizes: np.ndarray):
        views, starts = self.views(sizes)
        stream = torch.cuda.current_stream(DEV).cuda_stream
        wrappers = self.nv.as_images(views, cuda_stream=stream)
        out = self.decoder._decoder.decode(streams, images=wrappers, params=self.params,
                                           cuda_stream=stream)
        return out, views, starts


def check_pixels(flat: Flat, decoder: NvImageCodecDecoder, paths: list[str]) -> dict:
    sizes = upright_sizes(paths)
    nv = flat.nv
    ref = decoder.decode_files(paths)  # tensors as the loader gets them now
    out, views, starts = flat.decode([nv.CodeStream(p) for p in paths], sizes)
    torch.cuda.synchronize()
    report = {"files": len(paths), "none_returned": sum(x is None for x in out), "mismatch": []}
    same_ptr = 0
    for i, (p, r, v, o) in enumerate(zip(paths, ref, views, out)):
        if o is not None and o.__cuda_array_interface__["data"][0] == v.data_ptr():
            same_ptr += 1
        if r is None or tuple(r.shape) != tuple(v.shape) or not torch.equal(r, v):
            diff = None if r is None or r.shape != v.shape else int((r.int() - v.int()).abs().max())
            report["mismatch"].append({"file": os.path.basename(p),
                                       "ref": None if r is None else list(r.shape),
                                       "flat": list(v.shape), "max_diff": diff,
                                       "returned": None if o is None else list(o.shape)})
    report["same_pointer"] = same_ptr
    return report


def check_library(decoder: NvImageCodecDecoder, paths: list[str]) -> dict:
    """The library's ``decode_packed`` (paths and bytes) against ``decode_files``."""
    from vidloader.images._packed import PackedImages

    sizes = upright_sizes(paths)
    ref = decoder.decode_files(paths)
    report = {}
    for label, sources in (("paths", paths), ("bytes", [Path(p).read_bytes() for p in paths])):
        out = decoder.decode_packed(sources, sizes)
        torch.cuda.synchronize()
        rows = list(out)
        report[label] = {"packed": isinstance(out, PackedImages),
                         "equal": sum(r is not None and x is not None and torch.equal(r, x)
                                      for r, x in zip(ref, rows)),
                         "files": len(paths), "cpu_fallbacks": decoder.cpu_fallbacks}
    return report


def per_image_costs(flat: Flat, decoder: NvImageCodecDecoder, paths: list[str], reps: int = 10) -> dict:
    nv = flat.nv
    streams = [nv.CodeStream(p) for p in paths]
    stream = torch.cuda.current_stream(DEV).cuda_stream
    images = decoder._decoder.decode(streams, params=decoder._params, cuda_stream=stream)
    torch.cuda.synchronize()
    sizes = upright_sizes(paths)
    res = {}

    def timed(label, fn):
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        res[label] = (time.perf_counter() - t0) / reps / len(paths) * 1e6

    timed("as_tensor_us", lambda: [torch.as_tensor(x, device=DEV) for x in images])
    timed("from_dlpack_us", lambda: [torch.from_dlpack(x) for x in images])
    timed("views_us", lambda: flat.views(sizes))
    views, _ = flat.views(sizes)
    timed("as_images_us", lambda: nv.as_images(views, cuda_stream=stream))
    timed("code_stream_us", lambda: [nv.CodeStream(p) for p in paths])
    from vidloader.images._nvimgcodec import _BufferPart
    from vidloader.images._packed import PackedImages

    packed = PackedImages.allocate(sizes, DEV)
    timed("allocate_us", lambda: PackedImages.allocate(sizes, DEV))
    timed("buffer_parts_us", lambda: [_BufferPart(packed.pointer(i), int(packed.heights[i]),
                                                  int(packed.widths[i]), True)
                                      for i in range(len(packed))])
    parts = [_BufferPart(packed.pointer(i), int(packed.heights[i]), int(packed.widths[i]), True)
             for i in range(len(packed))]
    timed("as_images_of_parts_us", lambda: nv.as_images(parts, cuda_stream=stream))
    timed("image_shape_us", lambda: [tuple(x.shape) for x in images])
    return res


def rates(flat: Flat, decoder: NvImageCodecDecoder, folder: ImageFolder, batches: int) -> dict:
    nv = flat.nv
    rng = np.random.default_rng(0)
    plans = [rng.choice(len(folder), 256, replace=False) for _ in range(batches)]
    stream = torch.cuda.current_stream(DEV).cuda_stream
    out = {}

    def now_path(idx):
        streams = [nv.CodeStream(folder.path(i)) for i in idx.tolist()]
        images = decoder._decoder.decode(streams, params=decoder._params, cuda_stream=stream)
        tensors = [torch.as_tensor(x, device=DEV) for x in images]
        return torch.cat([t.reshape(-1, 3) for t in tensors])

    def flat_path(idx):
        streams = [nv.CodeStream(folder.path(i)) for i in idx.tolist()]
        return flat.decode(streams, folder.sizes[idx])

    def library_packed(idx):
        return decoder.decode_packed([folder.path(i) for i in idx.tolist()], folder.sizes[idx],
                                     cut_short=folder.cut_short[idx].tolist())

    def decode_only(idx):
        streams = [nv.CodeStream(folder.path(i)) for i in idx.tolist()]
        return decoder._decoder.decode(streams, params=decoder._params, cuda_stream=stream)

    for round_ in (1, 2):
        for label, fn in (("now: decode + as_tensor + cat", now_path),
                          ("flat buffer (views)", flat_path),
                          ("decode_packed (library)", library_packed),
                          ("decode alone", decode_only)):
            fn(plans[0])
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for idx in plans:
                keep = fn(idx)
                torch.cuda.current_stream(DEV).synchronize()
            del keep
            rate = batches * 256 / (time.perf_counter() - t0)
            out[f"{label} (round {round_})"] = rate
            print(f"{label:34s} round {round_}: {rate:8,.0f} images/s", flush=True)
    return out


def main() -> int:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 4000
    batches = int(sys.argv[2]) if len(sys.argv) > 2 else 40
    root = write_image_folder("/tmp/jpeg-into-buffer", num_classes=10, per_class=count // 10)
    folder = ImageFolder(root, progress=False)
    decoder = NvImageCodecDecoder(DEV)
    flat = Flat(decoder)
    special = special_files(Path("/tmp/jpeg-into-buffer-special"))
    regular = [folder.path(i) for i in range(256)]
    result = {"pixels_special": check_pixels(flat, decoder, special),
              "pixels_regular": check_pixels(flat, decoder, regular)}
    result["library_special"] = check_library(decoder, special)
    result["library_regular"] = check_library(decoder, regular)
    print(json.dumps(result, indent=1), flush=True)
    result["per_image_costs"] = per_image_costs(flat, decoder, regular)
    print(json.dumps(result["per_image_costs"], indent=1), flush=True)
    result["one_thread_rates"] = rates(flat, decoder, folder, batches)
    (Path(os.environ.get("OUT", ".")) / "jpeg_into_buffer_probe.json").write_text(
        json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
