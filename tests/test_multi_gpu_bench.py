"""``benchmarks/multi_gpu.py`` (issue 19): two ranks under ``torch.distributed.run`` on gloo
receive one epoch together, each sample exactly once, in equal batch counts; and the check
that says so fails when the ranks' shards are wrong."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

import vidloader

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "multi_gpu.py"


def _module():
    spec = importlib.util.spec_from_file_location("multi_gpu_bench", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_two_ranks_on_gloo_receive_the_epoch_exactly_once(tmp_path):
    """One whole epoch of multicam-stream (the bench's own stream-order sampler, 6 camera rows
    per sample), 3 batches per rank, CPU decode workers."""
    out = tmp_path / "exact.json"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           str(SCRIPT), "--backend", "cpu", "--workload", "multicam-stream", "--scale", "tiny",
           "--data", str(tmp_path / "data"), "--num-workers", "1", "--batch-size", "12",
           "--record", "--batches", "3", "--out", str(out)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["status"] == "ok" and report["world_size"] == 2
    check = report["check"]
    assert check["batch_counts"] == [3, 3] and check["equal_batch_counts"]
    assert check["whole_epoch"] and check["single_process_epoch_batches"] == 6
    assert check["rows_received"] == check["distinct_rows_received"] == 2 * 3 * 12
    assert check["missing_rows"] == check["extra_rows"] == 0
    assert check["exactly_once"] and check["ok"]
    assert [r["batches"] for r in report["ranks"]] == [3, 3]
    assert all(r["frames"] > 0 and r["batches_not_as_planned"] == [] for r in report["ranks"])


def test_a_window_of_contiguous_shards_passes_the_check(tmp_path):
    """A timed window (no whole epoch) of sequential frames on 2 ranks: since the library
    shards stream orders in contiguous blocks, the ranks do not cover a prefix of the
    single-process epoch; the first H200 x2 run failed the old prefix check with every rank
    as planned."""
    out = tmp_path / "window.json"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           str(SCRIPT), "--backend", "cpu", "--workload", "sequential", "--scale", "tiny",
           "--data", str(tmp_path / "data"), "--num-workers", "1", "--batch-size", "12",
           "--batches", "2", "--out", str(out),
           # each rank alone (no per-step all-reduce), a loader argument over the bench's
           "--sync", "none", "--loader-option", "prefetch=3"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    report = json.loads(out.read_text())
    check = report["check"]
    assert check["window_check"] == "rows within the epoch" and check["extra_rows"] == 0
    assert check["ranks_as_planned"] and check["exactly_once"] and check["ok"]
    assert report["sync"] == "none" and report["loader_options"] == {"prefetch": 3}
    assert "sync none, prefetch=3" in run.stdout


def test_loader_options_read_json_values_and_refuse_a_bare_word():
    mg = _module()
    assert mg.loader_options(["prefetch=6", "lookahead=8", "backend=nvdec"]) == {
        "prefetch": 6, "lookahead": 8, "backend": "nvdec"}
    with pytest.raises(SystemExit, match="KEY=VALUE"):
        mg.loader_options(["prefetch"])


def _received(sampler, index, world: int, batches: int, samples: int) -> list[list[np.ndarray]]:
    """What each rank would receive: its shard of the plan, as (video, frame) rows per batch."""
    out = []
    for rank in range(world):
        plan = sampler.plan_epoch(index, epoch=0, batch_size=samples, rank=rank,
                                  world_size=world, drop_last=True)
        out.append([np.stack([plan.batch(b).video_indices, plan.batch(b).frame_indices[:, 0]], 1)
                    for b in range(batches)])
    return out


def _check(mg, sampler, index, rows, shard: str, record: bool = True, samples: int = 8) -> dict:
    results = [{"batches": len(r), "_rows": r, "batches_not_as_planned": []} for r in rows]
    job = types.SimpleNamespace(index=index, plan=types.SimpleNamespace(sampler=sampler))
    return mg.check_union(results, {"job": job, "samples": samples}, shard, len(rows), record)


def test_the_union_check_fails_on_wrong_shards():
    mg = _module()
    index = types.SimpleNamespace(num_frames=np.array([30, 50, 40], dtype=np.int64))
    sampler = vidloader.RandomFrames(seed=3, num_samples=64)  # 2 ranks x 4 batches x 8
    rows = _received(sampler, index, 2, 4, 8)
    good = _check(mg, sampler, index, rows, "library")
    assert good["ok"] and good["whole_epoch"] and good["rows_received"] == 64

    same = _check(mg, sampler, index, [rows[0], rows[0]], "library")  # the rank was ignored
    assert not same["ok"] and not same["union_equals_epoch"]
    assert same["missing_rows"] == same["extra_rows"] == 32

    short = _check(mg, sampler, index, [rows[0], rows[1][:3]], "library")
    assert not short["equal_batch_counts"] and not short["ok"]

    window = _check(mg, sampler, index, [r[:2] for r in rows], "library", record=False)
    assert window["ok"] and window["window_check"] == "rows within the epoch"
    twice = _check(mg, sampler, index, [rows[0][:2], rows[0][:2]], "library", record=False)
    assert not twice["ok"] and twice["extra_rows"] == 16  # a window with a rank's rows twice
    assert not _check(mg, sampler, index, [r[:2] for r in rows], "library")["ok"]  # not whole

    blocks = mg.contiguous_shards(sampler)
    block_rows = _received(blocks, index, 2, 4, 8)
    assert _check(mg, blocks, index, block_rows, "contiguous")["ok"]
    assert not _check(mg, blocks, index, [r[:2] for r in rows], "contiguous", record=False)["ok"]
    # Contiguous blocks: rank 1 starts where rank 0's batches end in the single-process epoch.
    whole = sampler.plan_epoch(index, epoch=0, batch_size=8, drop_last=True)
    assert np.array_equal(block_rows[1][0][:, 0], whole.batch(4).video_indices)
