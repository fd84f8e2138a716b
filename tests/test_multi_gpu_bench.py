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


@pytest.mark.parametrize("variant", [[], ["--sync", "none", "--loader-option", "prefetch=3",
                                          "--cores", "1"]],
                         ids=["lockstep", "alone-prefetch3-pinned"])
def test_a_window_of_contiguous_shards_passes_the_check(tmp_path, variant):
    """A timed window (no whole epoch) of sequential frames on 2 ranks: since the library
    shards stream orders in contiguous blocks, the ranks do not cover a prefix of the
    single-process epoch; the first H200 x2 run failed the old prefix check with every rank
    as planned. Also each rank alone (``--sync none``) with a loader argument over the
    bench's, which reaches each rank's loader, each rank pinned to a core of its own."""
    if variant and len(os.sched_getaffinity(0)) < 2:
        pytest.skip("pinning two ranks to a core each needs two cores")
    out = tmp_path / "window.json"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           str(SCRIPT), "--backend", "cpu", "--workload", "sequential", "--scale", "tiny",
           "--data", str(tmp_path / "data"), "--num-workers", "1", "--batch-size", "12",
           "--batches", "2", "--out", str(out), *variant]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    report = json.loads(out.read_text())
    check = report["check"]
    assert check["window_check"] == "rows within the epoch" and check["extra_rows"] == 0
    assert check["ranks_as_planned"] and check["exactly_once"] and check["ok"]
    if variant:
        assert report["sync"] == "none" and report["loader_options"] == {"prefetch": 3}
        assert "sync none, 1 cores a rank, prefetch=3" in run.stdout
        assert "no collective" in report["model"]
        assert [r["loader_prefetch"] for r in report["ranks"]] == [3, 3]
        cores = [r["cores"] for r in report["ranks"]]
        assert all(len(c) == 1 for c in cores) and cores[0] != cores[1]
    else:
        assert report["sync"] == "step" and "one all-reduce" in report["model"]
        assert [r["loader_prefetch"] for r in report["ranks"]] == [2, 2]


def test_train_step_all_reduces_only_in_lockstep(monkeypatch):
    """``--sync step`` meets the other ranks once a step (gradients averaged over them);
    ``--sync none`` never does, and keeps the rank's own gradients."""
    import torch
    import torch.distributed as dist

    mg = _module()
    calls = []

    def all_reduce(tensor):
        calls.append(tensor.numel())
        tensor.mul_(2)  # as if another rank had the same gradients and flag
    monkeypatch.setattr(dist, "all_reduce", all_reduce)
    frames = torch.rand(2, 16, 16, 3) * 255
    grads = {}
    for sync in (True, False):
        model = mg.make_model(torch.device("cpu"))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.0)  # keep the weights
        assert mg.train_step(model, optimizer, frames, False, 2, sync=sync) is False
        grads[sync] = [p.grad.clone() for p in model.parameters()]
    assert len(calls) == 1  # the lockstep step only
    for a, b in zip(grads[True], grads[False], strict=True):
        assert torch.allclose(a, b)  # (2 x own) / 2 ranks == own


def test_ranks_alone_may_end_at_different_counts():
    """Without lockstep, ranks on their own clocks stop at different batch counts: the check
    compares the first ``min(counts)`` batches and does not ask for equal counts; in
    lockstep unequal counts fail it."""
    mg = _module()
    rows = [[np.array([[0, 0]]), np.array([[0, 2]])], [np.array([[0, 1]])]]
    sampler = types.SimpleNamespace()
    whole = types.SimpleNamespace(batch=lambda b: types.SimpleNamespace(
        video_indices=np.array([0]), frame_indices=np.array([[b]])))
    sampler.plan_epoch = lambda index, **kw: type("P", (), {"__len__": lambda self: 4,
                                                            "batch": lambda self, b: whole.batch(b)})()
    results = [{"batches": len(r), "_rows": r, "batches_not_as_planned": []} for r in rows]
    job = types.SimpleNamespace(index=None, plan=types.SimpleNamespace(sampler=sampler))
    ctx = {"job": job, "samples": 1}
    alone = mg.check_union(results, ctx, "library", 2, False, lockstep=False)
    assert alone["exactly_once"] and alone["ok"] and not alone["equal_batch_counts"]
    assert not mg.check_union(results, ctx, "library", 2, False)["ok"]


def test_variants_keep_their_own_rows_in_the_table(tmp_path, capsys):
    """Runs of one workload with other settings do not replace the default run: each
    variant has its row, against its own one-GPU run where there is one."""
    mg = _module()

    def write(name, world, fps, **extra):
        (tmp_path / f"{name}.json").write_text(json.dumps({
            "workload": "sequential", "world_size": world, "status": "ok",
            "total_frames_per_s": fps, "check": {"exactly_once": True}, **extra}))
    write("seq-1", 1, 100.0)
    write("seq-2", 2, 190.0)
    write("seq-2-alone", 2, 150.0, sync="none")
    write("seq-1-p6", 1, 120.0, loader_options={"prefetch": 6})
    write("seq-2-p6", 2, 200.0, loader_options={"prefetch": 6})
    assert mg.summarize(str(tmp_path), str(tmp_path / "table.out")) == 0
    table = {row["variant"]: row for row in json.loads((tmp_path / "table.out").read_text())["table"]}
    assert table["library"]["ratio"] == pytest.approx(1.9)
    assert table["library, sync none"]["ratio"] == pytest.approx(1.5)  # against the default
    assert table["library, prefetch=6"]["ratio"] == pytest.approx(200 / 120)  # its own
    assert "sequential (library, sync none)" in capsys.readouterr().out


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
