"""Where the GPU JPEG augmentation's host time goes (issue 15): ``fill_from_images`` on
batches decoded by nvImageCodec, under ``torch.profiler`` (CPU side), for each way of packing
windows; prints the ops by self CPU time.

Usage (on the device, nvImageCodec installed): ``python3 benchmarks/diag/augment_profile.py``.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from vidloader.bench._images import _rrc_proc
from vidloader.images import ImageFolder, _batched
from vidloader.images._nvimgcodec import NvImageCodecDecoder
from vidloader.images._synthetic import write_image_folder
from vidloader.pipeline import ImageLoader
from vidloader.pipeline._image_fill import fill_from_images
from vidloader.sampling import SequentialFrames

BATCH, BATCHES = 256, 6


def main() -> None:
    folder = ImageFolder(write_image_folder(Path("/tmp/jpeg-stages"), num_classes=10, per_class=200))
    decoder = NvImageCodecDecoder(torch.device("cuda", 0))
    loader = ImageLoader(folder, batch_size=BATCH, processing=_rrc_proc(), device="cuda",
                         decoder="nvimgcodec", sampler=SequentialFrames())
    plans = [loader._epoch_plan(0).batch(b) for b in range(BATCHES)]
    decoded = [decoder.decode_files([folder.path(i) for i in p.video_indices.tolist()]) for p in plans]
    slot = torch.empty((BATCH, 3, 224, 224), device="cuda")
    for packing in ("gather", "copies"):
        _batched.PACKING = packing
        for plan, images in zip(plans[:2], decoded[:2]):  # warm-up
            fill_from_images(loader.config, "nvimgcodec", images, plan, slot)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for plan, images in zip(plans[2:], decoded[2:]):
                fill_from_images(loader.config, "nvimgcodec", images, plan, slot)
            torch.cuda.synchronize()
        print(f"== packing {packing}: {BATCHES - 2} batches")
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=22))


if __name__ == "__main__":
    main()
