"""An ImageNet-layout folder through vidloader: training images in one folder per class
(``ImageFolder``), validation images in one flat folder with a ``<file> <label>`` list
(``ImageFiles.from_list``: Caffe's ``val.txt`` convention, labels 0-based in the order of the
sorted ``train/`` folder names, not the devkit's 1-based class IDs), 224² random resized
crop + flip + normalise for training, resize + 0.875 centre crop for validation, decoded by
Pillow in worker processes or, on a GPU, by nvImageCodec::

    python examples/images/imagenet.py --root ~/data/imagenet         # train/ and val/ (+ val/val.txt)
    python examples/images/imagenet.py --root ~/data/imagenet --device cuda --decoder nvimgcodec
    python examples/images/imagenet.py                                # a generated folder
    python examples/images/imagenet.py --tiny                         # seconds (CI)

It trains a small CNN for ``--steps`` steps and reports the validation accuracy and the
training pace (loader and model, worker start-up included). The generated pictures carry no
class signal (their labels are the folders they were written to): there the accuracy is
chance, and the run checks the plumbing.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch
from torch import nn

import vidloader
from vidloader.images import ImageFiles, ImageFolder, ImageProcess
from vidloader.images._synthetic import write_image_folder

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)  # ImageNet's


def write_imagenet_like(root: Path, classes: int, per_class: int) -> Path:
    """``root/train/<class>/*.jpg`` and a flat ``root/val/`` with ``val.txt``: every fourth
    generated file of each class moved to ``val/`` and listed with its class number. Kept
    as it is where ``val/val.txt`` exists already (a second run on the same folder)."""
    if (root / "val" / "val.txt").exists():
        return root
    write_image_folder(root / "train", num_classes=classes, per_class=per_class)
    val = root / "val"
    val.mkdir(exist_ok=True)
    lines = []
    for label, folder in enumerate(sorted((root / "train").iterdir())):
        for path in sorted(folder.glob("*.jpg"))[::4]:
            name = f"{folder.name}_{path.name}"
            path.rename(val / name)
            lines.append(f"{name} {label}")
    (val / "val.txt").write_text("\n".join(lines) + "\n")
    return root


def validation_set(root: Path, classes: list[str], **options):
    """``val/val.txt`` with a flat ``val/`` (labels: positions in ``classes``, the training
    folders' sorted names), else ``val/<class>/`` folders, which must be the same classes."""
    listing = root / "val" / "val.txt"
    if listing.exists():
        return ImageFiles.from_list(listing, classes=classes, **options)
    val = ImageFolder(root / "val", **options)
    if val.classes != classes:
        raise SystemExit(f"{root / 'val'}: its class folders differ from train/'s; labels "
                         "would not match")
    return val


def model(classes: int) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 16, 7, stride=4, padding=3), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
        nn.Flatten(), nn.Linear(32, classes))


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--root", help="a folder with train/ and val/ (default: generate one)")
    p.add_argument("--data", help="where to generate it (default: a temporary folder)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--decoder", default="auto", help="auto (Pillow), pillow or nvimgcodec")
    p.add_argument("--workers", type=int, default=None, help="decoding processes")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--tiny", action="store_true", help="a few dozen files, a few steps")
    args = p.parse_args(argv)
    if args.tiny:
        args.batch_size, args.steps = 8, 3
        args.workers = 2 if args.workers is None else args.workers
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.root) if args.root else write_imagenet_like(
            Path(args.data or tmp), classes=3 if args.tiny else 10, per_class=8 if args.tiny else 64)
        options = {"num_workers": 0 if args.tiny else None, "progress": not args.tiny}
        train_set = ImageFolder(root / "train", **options)
        val_set = validation_set(root, train_set.classes, **options)
        return run(train_set, val_set, args)


def run(train_set, val_set, args) -> dict:
    device = torch.device(args.device)
    common = {"batch_size": args.batch_size, "device": device, "decoder": args.decoder,
              "num_workers": args.workers}
    train = vidloader.ImageLoader(
        train_set, **common, sampler=vidloader.RandomFrames(seed=0), persistent_workers=True,
        processing=ImageProcess(size=224, crop="random_resized", random_flip=True,
                                dtype="float32", normalized=True, mean=MEAN, std=STD,
                                layout="chw"))
    net = model(len(train_set.classes)).to(device)
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    step, seen, start = 0, 0, time.perf_counter()
    try:
        epoch = 0
        while step < args.steps:
            train.set_epoch(epoch)
            for batch in train:
                loss = nn.functional.cross_entropy(net(batch["images"]), batch["label"].to(device))
                opt.zero_grad()
                loss.backward()
                opt.step()
                step, seen = step + 1, seen + len(batch["label"])
                if step == args.steps:
                    break
            epoch += 1
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        rate = seen / (time.perf_counter() - start)
    finally:
        train.shutdown()
    val = vidloader.ImageLoader(
        val_set, **common, sampler=vidloader.SequentialFrames(),
        processing=ImageProcess(size=224, crop="center", center_fraction=0.875,
                                dtype="float32", normalized=True, mean=MEAN, std=STD,
                                layout="chw"))
    correct = total = 0
    net.eval()
    try:
        with torch.no_grad():
            for batch in val:
                predicted = net(batch["images"]).argmax(1)
                correct += int((predicted == batch["label"].to(device)).sum())
                total += len(predicted)
    finally:
        val.shutdown()
    print(f"{len(train_set)} training images in {len(train_set.classes)} classes, "
          f"{total} validation images ({type(val_set).__name__}); {step} steps at {rate:,.0f} "
          f"images/s (loader and model, {device}, {args.decoder} decoder); validation "
          f"accuracy {correct / total:.3f}")
    return {"accuracy": correct / total, "validation_images": total, "images_per_s": rate,
            "steps": step, "validation_set": type(val_set).__name__}


if __name__ == "__main__":
    main()
