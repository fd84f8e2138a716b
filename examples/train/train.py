"""Train a small 3D CNN on generated videos whose label is learnable: the direction a square
moves (right or left). Trained twice, with exact random clips (``Clips``) and with GOP-local
relaxed sampling (``GopShuffle``), and the held-out accuracy of each is printed::

    python examples/train/train.py                 # minutes on 2 cores
    python examples/train/train.py --tiny          # seconds (CI)

The question it answers on a model, not only on paper: does relaxed sampling (clips of a
GOP decoded together, batches of correlated clips) cost accuracy? ``docs/sampling.md`` gives
the design-effect argument; here both samplers see every clip once per epoch.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import av
import numpy as np
import torch
from torch import nn

import vidloader

SIDE, BOX = 32, 6


def make_video(path: Path, direction: int, seed: int, frames: int, gop: int) -> None:
    """A noisy background with a bright square moving 1 px per frame right (0) or left (1)."""
    rng = np.random.default_rng(seed)
    background = rng.integers(0, 90, size=(SIDE, SIDE, 3), dtype=np.uint8)
    x0, y0 = rng.integers(0, SIDE), rng.integers(2, SIDE - BOX - 2)
    color = rng.integers(160, 256, size=3, dtype=np.uint8)
    with av.open(str(path), "w") as out:
        stream = out.add_stream("libx264", rate=30)
        stream.width = stream.height = SIDE
        stream.pix_fmt = "yuv420p"
        stream.options = {"x264-params": f"keyint={gop}:min-keyint={gop}:scenecut=0:bframes=2",
                          "crf": "18"}
        for i in range(frames):
            img = background.copy()
            x = (x0 + (i if direction == 0 else -i)) % (SIDE - BOX)
            img[y0 : y0 + BOX, x : x + BOX] = color
            frame = av.VideoFrame.from_ndarray(img, format="rgb24")
            frame.pts = i
            out.mux(stream.encode(frame))
        out.mux(stream.encode(None))


def make_split(root: Path, name: str, videos: int, frames: int, gop: int, seed: int):
    """``videos`` files, half of each direction, and their index; labels are ``i % 2``."""
    folder = root / name
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(videos):
        path = folder / f"{i:04d}_dir{i % 2}.mp4"
        if not path.exists():
            make_video(path, i % 2, seed * 100_000 + i, frames, gop)
    index = vidloader.build_index(folder, num_workers=0, progress=False)
    return index, [int(Path(r.path).stem[-1]) for r in index]


def model_3d() -> nn.Module:
    return nn.Sequential(
        nn.Conv3d(3, 8, 3, padding=1), nn.ReLU(),
        nn.Conv3d(8, 16, 3, stride=2, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool3d(1), nn.Flatten(), nn.Linear(16, 2),
    )


def as_input(batch: dict) -> torch.Tensor:
    return batch["frames"].permute(0, 4, 1, 2, 3).float().div_(255)  # B,T,H,W,C → B,C,T,H,W


def train(sampler, train_set, epochs: int, batch_size: int, seed: int) -> nn.Module:
    torch.manual_seed(seed)
    index, labels = train_set
    model = model_3d()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    loader = vidloader.VideoLoader(index, sampler=sampler, batch_size=batch_size, labels=labels,
                                   num_workers=0)
    for epoch in range(epochs):
        loader.set_epoch(epoch)
        for batch in loader:
            loss = nn.functional.cross_entropy(model(as_input(batch)), batch["label"])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return model


@torch.no_grad()
def accuracy(model: nn.Module, test_set, clip: int) -> float:
    index, labels = test_set
    sampler = vidloader.Clips(sequence_length=clip, step=clip, shuffle=False)
    loader = vidloader.VideoLoader(index, sampler=sampler, batch_size=64, labels=labels,
                                   num_workers=0)
    right = total = 0
    for batch in loader:
        right += int((model(as_input(batch)).argmax(1) == batch["label"]).sum())
        total += len(batch["label"])
    return right / total


def main(argv=None) -> dict[str, float]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default="/tmp/vidloader-example-train")
    p.add_argument("--tiny", action="store_true", help="a few videos and one epoch (CI)")
    p.add_argument("--seeds", type=int, default=1, help="training runs per sampler")
    args = p.parse_args(argv)
    videos, frames, epochs, seeds = (4, 16, 1, 1) if args.tiny else (24, 96, 3, args.seeds)
    clip, gop = 8, 12
    root = Path(args.data) / ("tiny" if args.tiny else "full")
    train_set = make_split(root, "train", videos, frames, gop, seed=1)
    test_set = make_split(root, "test", max(4, videos // 2), frames, gop, seed=2)
    samplers = {
        "Clips (exact random)": lambda s: vidloader.Clips(sequence_length=clip, seed=s),
        "GopShuffle (relaxed)": lambda s: vidloader.GopShuffle(sequence_length=clip, seed=s),
    }
    results = {}
    for name, make in samplers.items():
        start = time.perf_counter()
        accs = [accuracy(train(make(s), train_set, epochs, 16, s), test_set, clip)
                for s in range(seeds)]
        results[name] = float(np.mean(accs))
        print(f"{name:22s} held-out accuracy {np.mean(accs):.3f} ± {np.std(accs):.3f} "
              f"over {seeds} seeds ({time.perf_counter() - start:.1f} s)", flush=True)
    return results


if __name__ == "__main__":
    main()
