"""NVVL's video super-resolution example, on vidloader: from each 3-frame clip, one
``processing`` dict makes the input (all 3 frames at a quarter of the size, float) and the
target (the middle frame at full size); a tiny model learns to upsample it::

    python examples/superres/train.py --steps 50
    python examples/superres/train.py --tiny                 # CI
    python examples/superres/train.py --backend nvdec        # on a GPU: frames stay there
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from torch import nn

import vidloader
from vidloader.synthetic import VideoSpec, make_dataset

SEQUENCE = 3


class TinySuperRes(nn.Module):
    """3 low-resolution frames (stacked on channels) → the middle one at 4× the size."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3 * SEQUENCE, 32, 3, padding=1), nn.ReLU(),
                                  nn.Conv2d(32, 3 * 16, 3, padding=1), nn.PixelShuffle(4))

    def forward(self, clip: torch.Tensor) -> torch.Tensor:  # B,C,T,h,w → B,C,4h,4w
        b, c, t, h, w = clip.shape
        middle = nn.functional.interpolate(clip[:, :, t // 2], scale_factor=4, mode="bilinear")
        return middle + self.body(clip.reshape(b, c * t, h, w))


def main(argv=None) -> list[float]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default="/tmp/vidloader-example-superres")
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--backend", choices=["cpu", "nvdec"], default="cpu")
    p.add_argument("--tiny", action="store_true", help="2 small videos, 3 steps (CI)")
    args = p.parse_args(argv)
    width, height, steps = (64, 48, 3) if args.tiny else (256, 192, args.steps)
    specs = [VideoSpec(width=width, height=height, num_frames=40, gop=10, seed=i)
             for i in range(2 if args.tiny else 6)]
    files = make_dataset(Path(args.data) / f"{width}x{height}", specs, num_workers=1)
    index = vidloader.build_index(files, num_workers=0, progress=False)
    # NVVL: "input" = every frame scaled by 1/4, "target" = the full-size middle frame only.
    processing = {
        "input": vidloader.Process(size=(height // 4, width // 4), dtype="float32",
                                   normalized=True, layout="cthw"),
        "target": vidloader.Process(index_map=[-1, 0, -1], dtype="float32", normalized=True,
                                    layout="cthw"),
    }
    device = "cuda" if args.backend == "nvdec" else None
    loader = vidloader.VideoLoader(
        index, sampler=vidloader.Clips(sequence_length=SEQUENCE, seed=0),
        batch_size=args.batch_size, processing=processing, backend=args.backend,
        num_workers=0, device=device)
    model = TinySuperRes().to(device or "cpu")
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    losses: list[float] = []
    while len(losses) < steps:
        for batch in loader:
            target = batch["target"][:, :, 0]  # B,C,1,H,W → B,C,H,W
            loss = nn.functional.l1_loss(model(batch["input"]), target)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            if len(losses) % 10 == 0 or len(losses) == steps:
                print(f"step {len(losses):4d}  L1 {loss.item():.4f}", flush=True)
            if len(losses) == steps:
                break
    print(f"input {tuple(batch['input'].shape)} -> target {tuple(target.shape)}; "
          f"L1 first {losses[0]:.4f}, last {losses[-1]:.4f}")
    return losses


if __name__ == "__main__":
    main()
