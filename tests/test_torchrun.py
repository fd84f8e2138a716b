"""Two ranks under ``torch.distributed.run`` (gloo, CPU): what the ranks receive together.

The rule (``sampling/_distributed.py``, as ``DistributedSampler``): rank ``r`` of ``W`` takes
epoch positions ``r, r + W, …``. With ``drop_last=False`` each rank gets ``ceil(N / W)``
samples, the last ``ceil(N / W)·W − N`` positions wrapping to the start of the epoch order;
with ``drop_last=True`` each gets ``floor(N / W)`` and then only its whole batches.
"""

from __future__ import annotations

import collections
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

import vidloader
from vidloader.synthetic import VideoSpec, make_dataset

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "examples" / "distributed" / "train.py"
WORLD, BATCH = 2, 8


def _torchrun(tmp: Path, *args: str) -> None:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc_per_node={WORLD}", str(SCRIPT), "--data", str(tmp / "data"),
           "--batch-size", str(BATCH), "--epochs", "2", "--checkpoint", str(tmp / "ck"), *args]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    # The timeout is the check that no rank blocks in DDP's all-reduce on a missing batch.
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]


def _records(directory: Path) -> list[dict]:
    return [json.loads((directory / f"rank{r}.json").read_text()) for r in range(WORLD)]


def _pairs(record: dict, epoch: int) -> list[tuple[int, int]]:
    return [tuple(p) for b in record["batches"] if b["epoch"] == epoch for p in b["pairs"]]


def _planned(index, rank: int, drop_last: bool, epoch: int = 0) -> list[tuple[int, int]]:
    """This rank's stream, computed from the sampler alone (no decoding)."""
    plan = vidloader.RandomFrames(seed=0).plan_epoch(
        index, epoch=epoch, batch_size=BATCH, rank=rank, world_size=WORLD, drop_last=drop_last)
    return [(int(v), int(f[0])) for b in plan for v, f in zip(b.video_indices, b.frame_indices)]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two launches (each costs two torch start-ups, so there are only two). The first runs
    epoch 0 whole, with a CPU decode worker per rank, then stops 3 batches into epoch 1 and
    saves each rank's position; the second, without workers, resumes epoch 1 from there.
    ``drop_last=False`` (padding); ``test_drop_last_rule_per_rank`` covers ``True``."""
    tmp = tmp_path_factory.mktemp("torchrun")
    specs = [VideoSpec(width=96, height=64, num_frames=15 + 4 * i, gop=8, seed=i) for i in range(5)]
    make_dataset(tmp / "data", specs, num_workers=1)
    index = vidloader.build_index(tmp / "data", num_workers=0, progress=False)
    index.save(tmp / "data" / "index.vlindex.npz")  # read by every rank
    per_epoch = math.ceil(math.ceil(index.total_frames / WORLD) / BATCH)
    _torchrun(tmp, "--num-workers", "1", "--stop-after", str(per_epoch + 3), "--record", str(tmp / "head"))
    _torchrun(tmp, "--num-workers", "0", "--record", str(tmp / "tail"))
    return _records(tmp / "head"), _records(tmp / "tail"), index


def test_two_ranks_cover_the_epoch_once_with_stated_padding(runs):
    records, _, index = runs
    frames = [(v, f) for v, r in enumerate(index) for f in range(r.num_frames)]
    total = len(frames)
    assert total % WORLD == 1  # the generated lengths make padding necessary
    per_rank = -(-total // WORLD)
    counts = collections.Counter(p for r in records for p in _pairs(r, epoch=0))
    assert set(counts) == set(frames)  # nothing missing, nothing invented
    assert sum(counts.values()) == per_rank * WORLD  # padding: ceil(N/W)·W − N repeats
    assert sum(c - 1 for c in counts.values()) == per_rank * WORLD - total
    assert {r["batches_per_epoch"] for r in records} == {-(-per_rank // BATCH)}
    assert [sum(b["epoch"] == 0 for b in r["batches"]) for r in records] == [-(-per_rank // BATCH)] * WORLD
    for rank, record in enumerate(records):  # each rank got exactly its shard, in order
        assert _pairs(record, epoch=0) == _planned(index, rank, drop_last=False)


def test_each_rank_resumes_its_own_stream(runs):
    heads, tails, index = runs
    for rank in range(WORLD):
        assert len(_pairs(heads[rank], epoch=1)) == 3 * BATCH and tails[rank]["resumed_at"] == 3
        assert {b["epoch"] for b in tails[rank]["batches"]} == {1}
        stream = _pairs(heads[rank], epoch=1) + _pairs(tails[rank], epoch=1)
        assert stream == _planned(index, rank, drop_last=False, epoch=1)


def test_drop_last_rule_per_rank(runs):
    """``drop_last=True``: each rank gets floor(N/W) positions, then only whole batches, and
    the same count, with no sample twice (the loader given the rank, as torchrun's env does)."""
    _, _, index = runs
    streams, lengths = [], []
    for rank in range(WORLD):
        loader = vidloader.VideoLoader(index, sampler=vidloader.RandomFrames(seed=0),
                                       batch_size=BATCH, size=(16, 16), drop_last=True,
                                       num_workers=0, rank=rank, world_size=WORLD)
        got = [(int(v), int(f)) for b in loader for v, f in zip(b["video_index"], b["frame_index"])]
        assert got == _planned(index, rank, drop_last=True)
        streams += got
        lengths.append(len(loader))
    whole_batches = (index.total_frames // WORLD) // BATCH  # drop_last: floor share, then whole batches
    assert lengths == [whole_batches] * WORLD
    assert len(streams) == len(set(streams)) == whole_batches * BATCH * WORLD
