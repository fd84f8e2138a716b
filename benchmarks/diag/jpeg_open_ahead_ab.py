"""The GPU JPEG loader with its files opened ahead on a reader thread (``OPEN_AHEAD``, written
in session 16 and taken out after this ran: no consistent gain, ``session16-5``; commit
6b24180 has it) against opened by each lane before decoding, alternated three times
each in one process on the image bench's JPEG workload (224² random resized crop + flip +
normalize, batch 256), then nvImageCodec decode alone on the same files (issue 15).

Usage (on the device): ``python3 benchmarks/diag/jpeg_open_ahead_ab.py [files] [batches]``;
prints a line per run and writes ``$OUT/jpeg_open_ahead_ab.json``.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from vidloader.bench import _images as bench
from vidloader.images import ImageFolder
from vidloader.images._synthetic import write_image_folder
from vidloader.pipeline import _image_decode


def main() -> int:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 4000
    batches = int(sys.argv[2]) if len(sys.argv) > 2 else 60
    root = write_image_folder("/tmp/jpeg-open-ahead", num_classes=10, per_class=count // 10)
    folder = ImageFolder(root, progress=False)
    results: dict = {"files": len(folder), "batch": 256, "batches": batches, "runs": []}
    for run in range(6):
        ahead = run % 2 == 0
        _image_decode.OPEN_AHEAD = ahead
        label = f"run {run}: {'opened ahead' if ahead else 'opened by the lane'}"
        bench._attempt(results, label,
                       lambda: bench._jpeg_vidloader(folder, "cuda", 256, batches, "nvimgcodec", 0))
        results["runs"].append({"open_ahead": ahead, **results.pop(label)})
    _image_decode.OPEN_AHEAD = True
    bench._attempt(results, "nvimgcodec decode alone", lambda: bench._decode_nvimgcodec(folder, 256, batches))
    out = Path(os.environ.get("OUT", ".")) / "jpeg_open_ahead_ab.json"
    out.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
