"""Check that every backend of ``vidloader bench`` delivers the planned frames.

The ``multicam-random`` workload keeps frames at their native size, so no resize blurs the
comparison: each backend's batches are compared with vidloader's CPU backend (bit-exact with
a full decode), as a mean absolute difference per batch (0 = identical; a wrong frame gives
tens). Exits 1 if a backend that ran differs by more than ``--tolerance``.

Usage: ``python benchmarks/peer_agreement.py --backends naive,decord,opencv,pynvc-simple``
"""

from __future__ import annotations

import argparse
import sys

from vidloader.bench import WORKLOADS, Skip, load_index, prepare_dataset
from vidloader.bench._peers import Job, make_peer
from vidloader.bench._workloads import make_plan


def _batches(name: str, job: Job) -> list:
    peer = make_peer(name)
    peer.check()
    return [b.cpu().clone() for b in peer.batches(job)]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backends", default="naive,decord,opencv,torchcodec")
    p.add_argument("--scale", default="tiny")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--batches", type=int, default=3)
    p.add_argument("--tolerance", type=float, default=4.0)
    args = p.parse_args()
    workload = WORKLOADS["multicam-random"]
    dataset = prepare_dataset("W3", args.scale, data_dir=args.data_dir)
    index = load_index(dataset)
    plan = make_plan(workload, index, dataset, batches=args.batches, seed=7, batch_size=12)
    job = Job(plan.index, plan, workload, workers=0)
    reference = _batches("vidloader", job)
    worst = 0.0
    for name in args.backends.split(","):
        try:
            got = _batches(name, job)
        except Skip as exc:
            print(f"{name:16s} skipped: {exc}")
            continue
        diffs = [float((a.float() - b.float()).abs().mean()) for a, b in zip(got, reference)]
        worst = max(worst, *diffs)
        print(f"{name:16s} mean |difference| per batch: {', '.join(f'{d:.2f}' for d in diffs)}")
    return 1 if worst > args.tolerance else 0


if __name__ == "__main__":
    sys.exit(main())
