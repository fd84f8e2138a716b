"""Two ranks under ``torch.distributed.run`` (gloo, CPU): what the ranks receive together.

The rule (``sampling/_distributed.py``, as ``DistributedSampler``): rank ``r`` of ``W`` takes
epoch positions ``r, r + W, …``. With ``drop_last=False`` each rank gets ``ceil(N / W)``
samples, the last ``ceil(N / W)·W − N`` positions wrapping to the start of the epoch order;
with ``drop_last=True`` each gets ``floor(N / W)`` and then only its whole batches.
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import vidloader

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "examples" / "distributed" / "train.py"
WORLD, BATCH = 2, 8


def _torchrun(tmp: Path, *args: str) -> None:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc_per_node={WORLD}", str(SCRIPT), "--data", str(tmp / "data"),
           "--generate", "5", "--batch-size", str(BATCH), *args]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    # The timeout is the check that no rank blocks in DDP's all-reduce on a missing batch.
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]


def _records(directory: Path) -> list[dict]:
    return [json.loads((directory / f"rank{r}.json").read_text()) for r in range(WORLD)]


def _pairs(record: dict) -> list[tuple[int, int]]:
    return [tuple(p) for b in record["batches"] for p in b["pairs"]]


def _planned(index, rank: int, drop_last: bool) -> list[tuple[int, int]]:
    """This rank's stream, computed from the sampler alone (no decoding)."""
    plan = vidloader.RandomFrames(seed=0).plan_epoch(
        index, epoch=0, batch_size=BATCH, rank=rank, world_size=WORLD, drop_last=drop_last)
    return [(int(v), int(f[0])) for b in plan for v, f in zip(b.video_indices, b.frame_indices)]


@pytest.fixture(scope="module")
def full_epoch(tmp_path_factory):
    """One uninterrupted epoch, ``drop_last=False``, one CPU decode worker per rank."""
    tmp = tmp_path_factory.mktemp("torchrun")
    _torchrun(tmp, "--num-workers", "1", "--record", str(tmp / "full"))
    return tmp, vidloader.VideoIndex.load(tmp / "data" / "index.vlindex.npz")


def test_two_ranks_cover_the_epoch_once_with_stated_padding(full_epoch):
    tmp, index = full_epoch
    records = _records(tmp / "full")
    frames = [(v, f) for v, r in enumerate(index) for f in range(r.num_frames)]
    total = len(frames)
    assert total % WORLD == 1  # the generated lengths make padding necessary
    per_rank = -(-total // WORLD)
    counts = collections.Counter(p for r in records for p in _pairs(r))
    assert set(counts) == set(frames)  # nothing missing, nothing invented
    assert sum(counts.values()) == per_rank * WORLD  # padding: ceil(N/W)·W − N repeats
    assert sum(c - 1 for c in counts.values()) == per_rank * WORLD - total
    assert {r["batches_per_epoch"] for r in records} == {-(-per_rank // BATCH)}
    assert [len(r["batches"]) for r in records] == [-(-per_rank // BATCH)] * WORLD
    for rank, record in enumerate(records):  # each rank got exactly its shard, in order
        assert _pairs(record) == _planned(index, rank, drop_last=False)


def test_each_rank_resumes_its_own_stream(full_epoch):
    tmp, index = full_epoch
    ck = str(tmp / "ck")
    common = ("--num-workers", "0", "--drop-last", "--checkpoint", ck)
    _torchrun(tmp, *common, "--stop-after", "3", "--record", str(tmp / "head"))
    _torchrun(tmp, *common, "--record", str(tmp / "tail"))
    heads, tails = _records(tmp / "head"), _records(tmp / "tail")
    streams = []
    for rank in range(WORLD):
        assert len(heads[rank]["batches"]) == 3 and tails[rank]["resumed_at"] == 3
        stream = _pairs(heads[rank]) + _pairs(tails[rank])
        assert stream == _planned(index, rank, drop_last=True)
        streams += stream
    total = sum(r.num_frames for r in index)
    whole_batches = (total // WORLD) // BATCH  # drop_last: floor share, then whole batches
    assert len(streams) == len(set(streams)) == whole_batches * BATCH * WORLD
