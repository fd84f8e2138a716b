"""``vidloader bench agreement``: check that every backend of ``vidloader bench run`` delivers
the planned frames.

The ``multicam-random`` workload keeps frames at their native size, so no resize blurs the
comparison: each backend's batches are compared with vidloader's CPU backend (bit-exact with
a full decode), as a mean absolute difference per batch (0 = identical; a wrong frame gives
tens). Exits 1 if a backend that ran differs by more than ``--tolerance``.

Usage: ``vidloader bench agreement --backends naive,decord,opencv,pynvc-simple``
"""

from __future__ import annotations

from ._backends import make_peer
from ._datasets import load_index, prepare_dataset
from ._peers import Job
from ._workloads import WORKLOADS, Skip, make_plan


def _batches(name: str, job: Job) -> list:
    peer = make_peer(name)
    peer.check()
    return [b.cpu().clone() for b in peer.batches(job)]


def run(args) -> int:
    """Compare the backends (options: ``vidloader bench agreement --help``); 1 if one differs."""
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
