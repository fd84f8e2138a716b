"""Session 20 (issue 15): do the decoder variants of ``session20_make_variants.py`` decode
what ``src``'s ``NvImageCodecDecoder`` decodes, and how fast does each decode alone?

- ``make DIR [files]``: writes ``DIR/`` (64 generated JPEGs, ~500×375, quality 90, plus
  edge cases: grayscale, progressive, 4:4:4, EXIF orientation 6, CMYK, PNG, a truncated JPEG)
  and the probe's folder ``/tmp/jpeg-budget`` (``jpeg_budget_probe.py``'s, same arguments);
- ``dump DIR OUT`` (``PYTHONPATH``: the variant's folder): builds the pools' decoder
  (``pipeline._image_gpu_workers.nvimgcodec_decoder``), decodes DIR's files as the pool feeds
  it (``decode_files(paths)`` where it has one, else ``decode(bytes)``) on a side stream, checks
  that a reduction queued right after the decode on that stream equals one after a full
  synchronisation (outputs ordered on the current stream), saves the images (CPU) to OUT;
  then the decode alone on the probe's folder: 256-file batches as the pool feeds it (bytes
  read beforehand), one thread, each batch synchronised, 3 s;
- ``compare DIR REF OUT...``: per variant the largest absolute difference from REF (``src``)
  and from Pillow (``images._pillow.decode_image``, EXIF applied) per image.
"""

from __future__ import annotations

import glob
import sys
import time
from pathlib import Path

BATCH = 256
PROBE_FOLDER = "/tmp/jpeg-budget"
EXTRAS = ("gray.jpg", "progressive.jpg", "s444.jpg", "exif6.jpg", "cmyk.jpg", "png.png",
          "truncated.jpg")


def _files(folder: str) -> list[str]:
    main = sorted(glob.glob(f"{folder}/class_*/*.jpg"))
    return main + [f"{folder}/{name}" for name in EXTRAS]


def make(folder: str, files: int) -> None:
    import numpy as np
    from PIL import Image

    from vidloader.images._synthetic import natural_like, write_image_folder

    write_image_folder(folder, num_classes=2, per_class=32, seed=20)
    rng = np.random.default_rng(7)
    pixels = natural_like(375, 500, rng)
    img = Image.fromarray(pixels)
    img.convert("L").save(f"{folder}/gray.jpg", quality=90)
    img.save(f"{folder}/progressive.jpg", quality=90, progressive=True)
    img.save(f"{folder}/s444.jpg", quality=90, subsampling=0)
    exif = Image.Exif()
    exif[0x0112] = 6
    img.save(f"{folder}/exif6.jpg", quality=90, exif=exif)
    img.convert("CMYK").save(f"{folder}/cmyk.jpg", quality=90)
    img.save(f"{folder}/png.png")
    Path(f"{folder}/truncated.jpg").write_bytes(Path(f"{folder}/s444.jpg").read_bytes()[:3000])
    t = time.perf_counter()
    write_image_folder(PROBE_FOLDER, num_classes=10, per_class=files // 40, copies=4)
    print(f"made {folder} ({len(_files(folder))} files) and {PROBE_FOLDER} "
          f"in {time.perf_counter() - t:.1f} s", flush=True)


def dump(folder: str, out: str) -> None:
    import torch

    import vidloader
    from vidloader.pipeline._image_gpu_workers import nvimgcodec_decoder

    device = torch.device("cuda", 0)
    decoder = nvimgcodec_decoder(device)
    paths = _files(folder)
    by_paths = callable(getattr(decoder, "decode_files", None))
    label = f"{type(decoder).__module__}.{type(decoder).__name__} from {Path(vidloader.__file__).parent}"

    def run(batch_paths, blobs):
        return decoder.decode_files(batch_paths) if by_paths else decoder.decode(blobs)

    blobs = [Path(p).read_bytes() for p in paths]
    run(paths, blobs)  # warm
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        images = run(paths, blobs)
        early = [None if x is None else x.to(torch.float64).sum() for x in images]
    torch.cuda.synchronize()
    late = [None if x is None else x.to(torch.float64).sum() for x in images]
    unordered = sum(int(a is not None and float(a) != float(b)) for a, b in zip(early, late))
    torch.save([None if x is None else x.cpu() for x in images], out)
    print(f"{label}: {'decode_files(paths)' if by_paths else 'decode(bytes)'}; "
          f"{sum(x is not None for x in images)}/{len(images)} decoded; "
          f"{unordered} read early on the side stream differ from after a sync", flush=True)

    probe = sorted(glob.glob(f"{PROBE_FOLDER}/class_*/*.jpg"))
    chunks = [probe[k * BATCH:(k + 1) * BATCH] for k in range(min(12, len(probe) // BATCH))]
    if not chunks:
        return
    read = [[Path(p).read_bytes() for p in c] for c in chunks]
    for c, b in zip(chunks[:2], read[:2]):
        run(c, b)
    torch.cuda.synchronize()
    t, n, k = time.perf_counter(), 0, 0
    while time.perf_counter() - t < 3.0:
        decoded = run(chunks[k % len(chunks)], read[k % len(chunks)])
        torch.cuda.current_stream().synchronize()
        n += sum(x is not None for x in decoded)
        k += 1
    rate = n / (time.perf_counter() - t)
    extra = {a: getattr(decoder, a) for a in ("cpu_fallbacks", "fallbacks") if hasattr(decoder, a)}
    print(f"decode alone ({'paths' if by_paths else 'bytes read beforehand'}, one thread, "
          f"{BATCH} a batch, synchronised): {rate:,.0f} images/s; {extra}", flush=True)


def compare(folder: str, ref: str, outs: list[str]) -> None:
    import torch

    from vidloader.images._pillow import decode_image

    paths = _files(folder)
    base = torch.load(ref)
    pillow = []
    for p in paths:
        try:
            pillow.append(torch.from_numpy(decode_image(p)[0]))
        except Exception:  # noqa: BLE001 - truncated etc.
            pillow.append(None)

    def diff(a, b):
        if a is None or b is None:
            return "none" if a is None and b is None else ("a:None" if a is None else "b:None")
        if a.shape != b.shape:
            return f"shape {tuple(a.shape)} vs {tuple(b.shape)}"
        return int((a.int() - b.int()).abs().max())

    n_main = len(paths) - len(EXTRAS)
    for out in [ref] + outs:
        name = Path(out).stem.removeprefix("check_")
        imgs = torch.load(out)
        vs_src = [diff(a, b) for a, b in zip(imgs[:n_main], base[:n_main])]
        vs_pil = [diff(a, b) for a, b in zip(imgs[:n_main], pillow[:n_main])]
        num = [d for d in vs_src if isinstance(d, int)]
        nump = [d for d in vs_pil if isinstance(d, int)]
        print(f"{name}: {n_main} generated JPEGs: max |diff| vs src {max(num) if num else '-'} "
              f"(mean of per-image max {sum(num) / max(1, len(num)):.2f}, "
              f"{n_main - len(num)} not comparable); vs Pillow {max(nump) if nump else '-'} "
              f"(mean {sum(nump) / max(1, len(nump)):.2f})", flush=True)
        for k, extra in enumerate(EXTRAS):
            i = n_main + k
            shape = None if imgs[i] is None else tuple(imgs[i].shape)
            print(f"    {extra}: shape {shape}; vs src {diff(imgs[i], base[i])}; "
                  f"vs Pillow {diff(imgs[i], pillow[i])}", flush=True)


def main() -> int:
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "make":
        make(args[0], int(args[1]) if len(args) > 1 else 8000)
    elif cmd == "dump":
        dump(args[0], args[1])
    elif cmd == "compare":
        compare(args[0], args[1], args[2:])
    else:
        raise SystemExit(__doc__)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
