"""Train a small CNN on CIFAR-10 as seed 004's DALI loader feeds it, with vidloader: batches
in DALI's shape (``output="dali"``: ``data[0]["data"]``, ``data[0]["label"]``), random crop with
padding 4, flip and normalisation done by the loader on its device, then the held-out
accuracy on the test set (no augmentation, the normal dict batches)::

    python examples/images/train.py --root ~/data/cifar10      # the real CIFAR-10
    python examples/images/train.py                            # a generated, learnable set
    python examples/images/train.py --device cuda              # the loader augments on the GPU
    python examples/images/train.py --tiny                     # seconds (CI)

Without ``--root`` it writes a CIFAR-10-format set (the official python batches) whose
classes each have their own colour, so the accuracy says the pipeline feeds the model the
right labels; on the real set, expect the accuracy of a small CNN after a few epochs.
"""

from __future__ import annotations

import argparse
import tempfile
import time

import torch
from torch import nn

import vidloader
from vidloader.images import CIFAR10, ImageProcess
from vidloader.images._synthetic import write_cifar10

MEAN, STD = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)  # CIFAR-10's


def model() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 8 * 8, 10))


def processing(train: bool) -> ImageProcess:
    """The seed's training augmentation, or none for testing; float32 CHW, normalised."""
    augment = {"crop": "random", "padding": 4, "random_flip": True} if train else {"crop": "none"}
    return ImageProcess(**augment, dtype="float32", normalized=True, mean=MEAN, std=STD,
                        layout="chw")


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--root", help="a folder holding cifar-10-batches-py/ (default: generate one)")
    p.add_argument("--data", help="where to generate the set (default: a temporary folder)")
    p.add_argument("--device", default="cpu", help="where the loader augments and the model runs")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--tiny", action="store_true", help="a few hundred images, one epoch")
    args = p.parse_args(argv)
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        root = args.root
        if root is None:
            train_n, test_n = (512, 256) if args.tiny else (10_000, 2_000)
            root = args.data or tmp
            write_cifar10(root, num_train=train_n, num_test=test_n, learnable=True)
        return train_and_test(CIFAR10(root, train=True), CIFAR10(root, train=False), args)


def train_and_test(train_set, test_set, args) -> dict:
    device = torch.device(args.device)
    net = model().to(device)
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    loader = vidloader.ImageLoader(train_set, batch_size=args.batch_size, device=device,
                                   processing=processing(train=True), output="dali",
                                   sampler=vidloader.RandomFrames(seed=0))
    epochs = 1 if args.tiny else args.epochs
    seen, start = 0, time.perf_counter()
    for epoch in range(epochs):
        loader.set_epoch(epoch)
        for data in loader:  # the seed's loop, less its .cuda(): the batches are on device
            images = data[0]["data"]
            labels = data[0]["label"].view(-1).long()  # the seed's squeeze(): 0-d for a batch of 1
            loss = nn.functional.cross_entropy(net(images), labels)
            opt.zero_grad()
            loss.backward()
            opt.step()
            seen += len(images)
        print(f"epoch {epoch}: loss {loss.item():.3f}")
    rate = seen / (time.perf_counter() - start)
    correct = total = 0
    net.eval()
    with torch.no_grad():
        for batch in vidloader.ImageLoader(test_set, batch_size=args.batch_size, device=device,
                                           processing=processing(train=False),
                                           sampler=vidloader.SequentialFrames()):
            predicted = net(batch["images"]).argmax(1)
            correct += int((predicted == batch["label"].to(device)).sum())
            total += len(predicted)
    accuracy = correct / total
    print(f"held-out accuracy {accuracy:.3f} on {total} images; training at {rate:,.0f} "
          f"images/s (loader and model, {device})")
    return {"accuracy": accuracy, "images_per_s": rate, "test_images": total}


if __name__ == "__main__":
    main()
