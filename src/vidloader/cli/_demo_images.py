"""``vidloader demo --images``: a generated CIFAR-10-format set and a generated JPEG folder
through ``ImageLoader``, with images/s and the machine."""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from .._utils._sysinfo import describe_machine, format_machine


def _rate(loader, batches: int) -> tuple[int, float]:
    """Images per second over ``batches`` batches after the first (start-up excluded)."""
    import torch

    images, start, seen = 0, None, 0
    while seen <= batches:
        for batch in loader:
            seen += 1
            if start is None:
                start = time.perf_counter()
            else:
                images += len(batch["images"])
            if seen > batches:
                break
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return images, time.perf_counter() - start


def run_image_demo(args) -> int:
    import torch

    from ..images import CIFAR10, ImageFolder, ImageProcess
    from ..images._synthetic import write_cifar10, write_image_folder
    from ..pipeline import ImageLoader

    root = Path(args.data_dir or os.path.join(tempfile.gettempdir(), "vidloader-demo-images"))
    device = "cuda" if torch.cuda.is_available() else None
    write_cifar10(root, num_train=10_000, num_test=100, seed=args.seed)
    cifar = ImageLoader(
        CIFAR10(root), batch_size=256, device=device,
        processing=ImageProcess(crop="random", padding=4, random_flip=True, dtype="float32",
                                normalized=True, layout="chw"))
    images, seconds = _rate(cifar, min(args.batches, 30))
    print(f"CIFAR-10 format, 10,000 generated 32x32 images, batch 256, crop with padding 4 + "
          f"flip + normalize on {device or 'cpu'}: {images / seconds:,.0f} images/s")
    per_class = min(64, 8 * (args.batches + 2))  # a few batches' worth for a short demo
    folder = ImageFolder(write_image_folder(root / "jpeg", num_classes=4, per_class=per_class,
                                            seed=args.seed), progress=False)
    jpeg = ImageLoader(
        folder, batch_size=32, num_workers=args.workers, device=device, persistent_workers=True,
        processing=ImageProcess(size=224, crop="random_resized", random_flip=True,
                                dtype="float32", normalized=True, layout="chw"))
    try:
        images, seconds = _rate(jpeg, min(args.batches, 12))
    finally:
        jpeg.shutdown()
    print(f"JPEG folder, {len(folder)} generated 500x375 files, batch 32, 224x224 random "
          f"resized crop + flip + normalize, Pillow on {jpeg.num_workers} workers: "
          f"{images / seconds:,.0f} images/s")
    print(format_machine(describe_machine()))
    return 0
