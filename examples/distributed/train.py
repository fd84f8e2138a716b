"""Data-parallel training with vidloader under torchrun: one rank per GPU (or CPU process).

Each rank builds its own ``VideoLoader``; the sampler shards the epoch by ``RANK`` /
``WORLD_SIZE`` (set by torchrun), so nothing is scattered between ranks. Each rank decodes
on its own GPU's NVDEC (``cuda:$LOCAL_RANK``) with ``--backend nvdec`` or ``combo``, or on
CPU worker processes with ``--backend cpu`` (gloo, no GPU needed)::

    python -m torch.distributed.run --standalone --nproc_per_node=2 \\
        examples/distributed/train.py --data /tmp/vl-dist --generate 12

Every rank gets the same number of batches (``len(loader)``), so no rank waits forever in
DDP's gradient all-reduce. ``--stop-after K --checkpoint CK`` stops every rank after ``K``
batches and saves each rank's loader position (and the model); running again with the same
``--checkpoint CK`` continues each rank's stream where it stopped. ``--record DIR`` writes
what each rank received (``DIR/rank<r>.json``: per batch, the (video, frame) pairs).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

import vidloader
from vidloader.synthetic import VideoSpec, make_dataset


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True, help="directory of videos (indexed once, by rank 0)")
    p.add_argument("--generate", type=int, default=0,
                   help="first generate this many small synthetic videos into --data")
    p.add_argument("--backend", choices=["cpu", "nvdec", "combo"], default="cpu")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--size", type=int, default=64, help="frames resized to SIZE x SIZE")
    p.add_argument("--num-workers", type=int, default=2, help="CPU decode/demux processes per rank")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--drop-last", action="store_true")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--stop-after", type=int, default=None, help="stop after K batches (all ranks)")
    p.add_argument("--checkpoint", default=None, help="save to / resume from CK.rank<r>.pt")
    p.add_argument("--record", default=None, help="write what each rank received to DIR")
    return p.parse_args(argv)


def setup() -> tuple[int, int, torch.device]:
    """Join the process group: NCCL and ``cuda:$LOCAL_RANK`` with a GPU, else gloo on CPU."""
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if torch.cuda.is_available():
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", device_id=device)
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    return dist.get_rank(), dist.get_world_size(), device


def load_index(args, rank: int) -> vidloader.VideoIndex:
    """Rank 0 generates (optionally) and indexes; the others wait and read the saved index."""
    path = Path(args.data) / "index.vlindex.npz"
    if rank == 0 and not path.exists():
        if args.generate:
            specs = [VideoSpec(width=96, height=64, num_frames=15 + 4 * i, gop=8, seed=i)
                     for i in range(args.generate)]
            make_dataset(args.data, specs, num_workers=1)
        vidloader.build_index(args.data, num_workers=0, progress=False).save(path)
    dist.barrier()
    return vidloader.VideoIndex.load(path)


def make_model(device: torch.device) -> nn.Module:
    model = nn.Sequential(
        nn.Conv2d(3, 8, 5, stride=4), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        nn.Linear(8, 2),
    ).to(device)
    ddp_ids = [device.index] if device.type == "cuda" else None
    return nn.parallel.DistributedDataParallel(model, device_ids=ddp_ids)


def train_step(model, optimizer, batch: dict, device: torch.device) -> float:
    x = batch["frames"].to(device, non_blocking=True).permute(0, 3, 1, 2).float() / 255
    y = batch["label"].to(device)
    loss = nn.functional.cross_entropy(model(x), y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()  # DDP all-reduces the gradients here: every rank must take this step
    optimizer.step()
    return loss.item()


def main(argv=None) -> None:
    args = parse_args(argv)
    rank, world, device = setup()
    index = load_index(args, rank)
    loader = vidloader.VideoLoader(
        index, sampler=vidloader.RandomFrames(seed=args.seed), batch_size=args.batch_size,
        size=(args.size, args.size), labels=[i % 2 for i in range(len(index))],
        backend=args.backend, num_workers=args.num_workers, drop_last=args.drop_last,
        device=device if device.type == "cuda" else None,
    )
    model = make_model(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    ck_path = f"{args.checkpoint}.rank{rank}.pt" if args.checkpoint else None
    resumed = bool(ck_path and os.path.exists(ck_path))
    if resumed:
        ck = torch.load(ck_path, map_location=device, weights_only=True)
        loader.load_state_dict(ck["loader"])  # refuses another rank's or config's state
        model.module.load_state_dict(ck["model"])
    record = {"rank": rank, "world_size": world, "batches_per_epoch": len(loader),
              "resumed_at": loader.state_dict()["next_batch"] if resumed else None, "batches": []}
    steps, loss = 0, float("nan")
    for epoch in range(loader.state_dict()["epoch"], args.epochs):
        if not (resumed and epoch == loader.state_dict()["epoch"]):
            loader.set_epoch(epoch)  # a resumed epoch starts at its saved batch instead
        for batch in loader:
            loss = train_step(model, optimizer, batch, device)
            pairs = torch.stack([batch["video_index"], batch["frame_index"]], 1)
            record["batches"].append({"epoch": epoch, "pairs": pairs.tolist()})
            steps += 1
            if args.stop_after is not None and steps >= args.stop_after:
                break
        else:
            continue
        break  # --stop-after: leave both loops with the loader's position intact
    if rank == 0:
        print(f"rank 0 of {world}: {steps} steps, {len(loader)} batches per epoch, "
              f"last loss {loss:.3f}, device {device}", flush=True)
    if ck_path:
        torch.save({"loader": loader.state_dict(), "model": model.module.state_dict()}, ck_path)
    if args.record:
        os.makedirs(args.record, exist_ok=True)
        Path(args.record, f"rank{rank}.json").write_text(json.dumps(record))
    loader.shutdown()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
