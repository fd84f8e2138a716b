"""The one-process GPU JPEG loader's variants, alternated round after round in ONE process
(issue 15; session 30).

``jpeg_loader_ab.py`` runs one variant a process: in session 30's last call
(``session30-11``) each run took ~25 s for ~3.5 s of timed batches (the folder's index, the
loader's start), so 200 s of device time gave six runs on a machine whose runs varied by
±15%. Here the folder is indexed once, and each run only starts a loader; the variants are
module switches set before the loader is made, restored after. The order alternates each
round (first to last, then last to first).

Variants: ``shipped`` (the defaults); ``split only`` (reads shared out, ``SPLIT_READS``; the
batches dealt to the lanes in turn, ``LANES_TAKE_ANY`` off: the default since session 31);
``any lane only``; ``neither``; ``both`` (session 30's default); ``pageable``
(``PIN_READ_SLABS`` off); ``prefetch 3`` (the loader's ``prefetch`` default 2 → 3);
``2 lanes`` / ``3 lanes`` (``NVIMGCODEC_LANES``; 2 is the default since session 31, 3 before). ``ROUNDS_ONLY``: labels to run, separated by ``;``.

Usage (on the device): ``python3 benchmarks/diag/jpeg_loader_rounds.py [images] [batches]
[rounds]``; prints a line a run and writes ``$OUT/jpeg_loader_rounds.json`` after each, with
the median images/s of each variant.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
from pathlib import Path

from vidloader.bench import _images as bench
from vidloader.images import ImageFolder
from vidloader.images._synthetic import write_image_folder
from vidloader.pipeline import ImageLoader, _image_decode, _image_readers

VARIANTS = {
    "shipped": {},
    # These four set both switches, so each means the same whatever the defaults. The others
    # change one thing and inherit the rest: until session31-11 that was any free lane
    # (``LANES_TAKE_ANY`` on), since session31-12 the batches dealt in turn ("2 lanes" is now
    # "shipped").
    "split only": {(_image_decode, "LANES_TAKE_ANY"): False, (_image_readers, "SPLIT_READS"): True},
    "any lane only": {(_image_decode, "LANES_TAKE_ANY"): True, (_image_readers, "SPLIT_READS"): False},
    "neither": {(_image_decode, "LANES_TAKE_ANY"): False, (_image_readers, "SPLIT_READS"): False},
    "both": {(_image_decode, "LANES_TAKE_ANY"): True, (_image_readers, "SPLIT_READS"): True},
    "pageable": {(_image_decode, "PIN_READ_SLABS"): False},
    # more batches in flight: with any free lane, the queued batches' reads are under way
    # before a lane takes them (prefetch 3 alone did not help in session30-4, dealt in turn)
    "prefetch 3": {("ImageLoader", "prefetch"): 3},
    # one pinned thread fed nvJPEG 29,000-31,000 images/s alone (session30-9): do 2 lanes do?
    "2 lanes": {(_image_decode, "NVIMGCODEC_LANES"): 2},
    "3 lanes": {(_image_decode, "NVIMGCODEC_LANES"): 3},
}


def run(folder, switches: dict, batches: int) -> dict:
    """One loader run with ``switches`` set, then restored."""
    saved = {key: _get(*key) for key in switches}
    try:
        for (where, name), value in switches.items():
            _set(where, name, value)
        return bench._sampled(lambda: bench._jpeg_vidloader(folder, "cuda", 256, batches,
                                                            "nvimgcodec", 0), SMI_QUERY)()
    finally:
        for (where, name), value in saved.items():
            _set(where, name, value)


def _get(where, name):  # a module's attribute, or one of ImageLoader's keyword defaults
    return ImageLoader.__init__.__kwdefaults__[name] if where == "ImageLoader" else getattr(where, name)


def _set(where, name, value) -> None:
    if where == "ImageLoader":
        ImageLoader.__init__.__kwdefaults__[name] = value
    else:
        setattr(where, name, value)


SMI_QUERY = None  # set in main: _monitor.jpeg_query()


def main() -> int:
    global SMI_QUERY
    from vidloader.bench._monitor import jpeg_query

    SMI_QUERY = jpeg_query()
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 4000
    batches = int(sys.argv[2]) if len(sys.argv) > 2 else 300
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 4
    only = [x for x in os.environ.get("ROUNDS_ONLY", "").split(";") if x]
    variants = [(k, v) for k, v in VARIANTS.items() if not only or k in only]
    folder = ImageFolder(write_image_folder("/tmp/jpeg-ab-x1", num_classes=10, per_class=count // 10),
                         progress=False)
    results: dict = {"files": len(folder), "batch": 256, "batches": batches, "runs": {}}
    out = Path(os.environ.get("OUT", ".")) / "jpeg_loader_rounds.json"
    for round_ in range(1, rounds + 1):
        for label, switches in (variants if round_ % 2 else variants[::-1]):
            try:
                row = run(folder, switches, batches)
            except Exception as exc:  # noqa: BLE001 - say what failed, go on
                row = {"error": repr(exc)}
            results["runs"][f"{label}, round {round_}"] = row
            rate = row.get("images_per_s")
            util = f" (JPEG decoder {row['jpeg_util_pct']:.0f}%)" if "jpeg_util_pct" in row else ""
            print(f"round {round_}, {label}: "
                  + (f"{rate:,.0f} images/s{util}" if rate else row.get("error", "?")), flush=True)
            results["median images/s"] = {
                name: statistics.median(r["images_per_s"] for key, r in results["runs"].items()
                                        if key.startswith(f"{name}, ") and "images_per_s" in r)
                for name, _ in variants
                if any(key.startswith(f"{name}, ") and "images_per_s" in r
                       for key, r in results["runs"].items())}
            out.write_text(json.dumps(results, indent=1))
    print("medians:", json.dumps(results.get("median images/s", {})), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
