"""``vidloader bench``: datasets, workloads, peers, harness and reports, on tiny data (CPU only).

The end-to-end tests run every workload for vidloader and the naive peer in-process with small
batches; one test runs the isolated (subprocess, spawned worker) path.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time

import numpy as np
import pytest
import torch

from vidloader.bench import (
    WORKLOADS,
    RunConfig,
    Skip,
    dataset_spec,
    load_index,
    main,
    markdown_section,
    prepare_dataset,
    register_bench,
    run_isolated,
)
from vidloader.bench._backends import make_peer, resolve_backends
from vidloader.bench._harness import steady_window
from vidloader.bench._markdown import load_reports
from vidloader.bench._multicam import multicam_sampler
from vidloader.bench._peers import Job, root_cause
from vidloader.bench._workloads import Geometry, make_plan, resolve_workloads

HAVE_MATPLOTLIB = importlib.util.find_spec("matplotlib") is not None
RUN_KEYS = {
    "backend", "workload", "status", "frames_per_s", "ratio_to_best_peer", "frames", "seconds",
    "window_batches", "decoded_per_delivered", "cpu_util_pct", "other_cpu_pct",
    "peak_host_memory_bytes", "gpu_util_pct", "nvdec_util_pct", "peak_gpu_memory_bytes",
    "batch_shape", "arrivals_s", "end_to_end_frames_per_s",
}


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("bench-data")


@pytest.fixture(scope="session")
def w1(data_dir):
    ds = prepare_dataset("W1", "tiny", data_dir=data_dir)
    return ds, load_index(ds)


@pytest.fixture(scope="session")
def w3(data_dir):
    ds = prepare_dataset("W3", "tiny", data_dir=data_dir)
    return ds, load_index(ds)


def _rig_positions(ds, index) -> list[list[int]]:
    """Each W3 clip's camera files as index positions."""
    pos = {p: i for i, p in enumerate(index.paths)}
    return [[pos[str(p)] for p in clip] for clip in ds.clips]


# -- datasets and workloads -------------------------------------------------------------------


def test_dataset_specs_scale_and_hash():
    tiny, full = dataset_spec("W1", "tiny"), dataset_spec("W1", "full")
    assert len(full.files) == 200 and full.files[0][1].width == 1920
    assert full.files[0][1].num_frames == 300 and full.files[0][1].bitrate == 12_000_000
    assert len(tiny.files) < 10 and tiny.files[0][1].width == 480
    assert tiny.digest() == dataset_spec("W1", "tiny").digest() != full.digest()
    w3 = dataset_spec("W3", "full")
    assert w3.cameras == 6 and w3.files[0][1].codec == "hevc" and w3.files[0][1].bframes == 0
    assert w3.files[0][0].startswith("clip_000/CAM_")
    w4 = dataset_spec("W4", "full")
    assert {s.gop for _, s in w4.files} == {250}
    assert {(s.width, s.height) for _, s in w4.files} == {(454, 340), (1280, 720)}
    with pytest.raises(ValueError):
        dataset_spec("W9")


def test_dataset_is_cached(w1, data_dir):
    ds, index = w1
    again = prepare_dataset("W1", "tiny", data_dir=data_dir)
    assert again.root == ds.root and (ds.root / "dataset.json").exists()
    assert len(index) == len(ds.paths) and ds.summary()["digest"] in ds.root.name


def test_resolve_names():
    assert [w.name for w in resolve_workloads("multicam")] == ["multicam-stream", "multicam-random"]
    assert resolve_backends("cpu")[:2] == ["vidloader", "naive"]
    with pytest.raises(ValueError, match="unknown workload"):
        resolve_workloads("nope")
    with pytest.raises(ValueError, match="unknown backend"):
        resolve_backends("vidloader,nope")


def test_geometry():
    assert Geometry(size=(224, 224)).output(1080, 1920) == (224, 224)
    g = Geometry(short_side=128, crop=(112, 112))
    assert g.resized(360, 640) == (128, 228) and g.output(360, 640) == (112, 112)
    assert Geometry().output(900, 1600) == (900, 1600)


def test_multicam_sampler_orders(w3):
    ds, index = w3
    clips = _rig_positions(ds, index)
    stream = multicam_sampler(clips, order="stream").plan_epoch(index, epoch=0, batch_size=2)
    b0, b1 = stream.batch(0), stream.batch(1)
    assert np.array_equal(b1.frame_indices, b0.frame_indices + 1)  # walks frame by frame
    for bp in (b0, multicam_sampler(clips, order="random", seed=1).plan_epoch(
            index, epoch=0, batch_size=2).batch(3)):
        rows = bp.video_indices.reshape(2, 6)
        assert all(list(r) in clips for r in rows)  # 6 cameras of one clip per sample
        assert (bp.frame_indices.reshape(2, 6) == bp.frame_indices.reshape(2, 6)[:, :1]).all()


def test_stream_order_units_keep_each_row_on_one_worker_and_decode_each_frame_once(w3):
    """The stream order is a plan of streams: units of one row over a few batches, every unit
    of a row on the same CPU worker, which keeps the row's video open and decodes forward.
    The batches equal those of whole-batch units (``lookahead=2``), and each frame is decoded
    about once (whole-batch units re-decoded every GOP from its keyframe: 5.0 decoded per
    delivered frame on W3 small)."""
    import torch

    from vidloader import VideoLoader
    from vidloader.pipeline._units import has_row_affinity

    ds, index = w3
    clips = _rig_positions(ds, index)
    sampler = multicam_sampler(clips, order="stream")
    assert has_row_affinity(sampler.plan_epoch(index, epoch=0, batch_size=2))

    def run(**kw):
        loader = VideoLoader(index, sampler=sampler, batch_size=2, num_workers=2, **kw)
        batches = [b["frames"].clone() for b in loader]
        return loader, torch.stack(batches)

    streams, got = run()
    assert streams.uses_block_units and streams.config.cpu_options["max_open_files"] >= 7
    assert streams.config.cpu_options["readers_per_file"] == 2
    batches, want = run(lookahead=2)
    assert not batches.uses_block_units
    assert torch.equal(got, want)
    mine, theirs = streams.decode_stats, batches.decode_stats
    assert mine.decoded <= 1.1 * mine.delivered, mine
    assert theirs.decoded > 1.5 * theirs.delivered, theirs


def test_stream_order_resumes_mid_block(w3):
    """A loader on the stream order stopped after 3 batches (inside a block of 4) and resumed
    from its ``state_dict`` delivers the rest of the epoch: with the first 3, exactly the
    uninterrupted epoch."""
    import torch

    from vidloader import VideoLoader

    ds, index = w3
    clips = _rig_positions(ds, index)
    sampler = multicam_sampler(clips, order="stream")
    whole = [b["frames"].clone() for b in VideoLoader(index, sampler=sampler, batch_size=2, num_workers=2)]
    first = VideoLoader(index, sampler=sampler, batch_size=2, num_workers=2)
    head = []
    for b in first:
        head.append(b["frames"].clone())
        if len(head) == 3:
            break
    state = first.state_dict()
    first.shutdown()
    again = VideoLoader(index, sampler=sampler, batch_size=2, num_workers=2)
    again.load_state_dict(state)
    tail = [b["frames"].clone() for b in again]
    assert len(head) + len(tail) == len(whole)
    assert torch.equal(torch.stack(head + tail), torch.stack(whole))


# -- like for like: every peer decodes the planned frames -------------------------------------


@pytest.mark.parametrize("backend", ["naive", "decord", "opencv"])
def test_peers_deliver_the_same_frames_as_vidloader(w3, backend):
    ds, index = w3
    peer = make_peer(backend)
    try:
        peer.check()
    except Skip as exc:
        pytest.skip(str(exc))
    plan = make_plan(WORKLOADS["multicam-random"], index, ds, batches=2, seed=5, batch_size=12)
    job = Job(plan.index, plan, WORKLOADS["multicam-random"], workers=0)
    ref = [b.clone() for b in make_peer("vidloader").batches(job)]
    got = [b.clone() for b in peer.batches(job)]
    assert [tuple(b.shape) for b in got] == [(12, 224, 400, 3)] * 2
    for a, b in zip(got, ref):  # native size: no resize, so the same decoded pictures
        assert (a.float() - b.float()).abs().mean() < 1.0
    assert (got[0].float() - ref[1].float()).abs().mean() > 5  # and the check can fail


def test_gpu_peers_skip_with_a_reason():
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    for name in ("pynvc-simple", "pynvc-threads", "vidloader-nvdec", "vidloader-combo", "dali"):
        with pytest.raises(Skip, match="CUDA"):
            make_peer(name).check()


def test_the_combo_warms_up_over_all_its_staging_slots(data_dir):
    """The combo holds a unit per CPU worker and NVDEC's queue: its warm-up covers them all
    (NVDEC's five units would leave batches decoded ahead to the timed window)."""
    from vidloader.bench._peers import VidloaderComboPeer, VidloaderNvdecPeer

    ds = prepare_dataset("W4", "tiny", data_dir=data_dir)
    plan = make_plan(WORKLOADS["clips"], load_index(ds), ds, batches=4, seed=0)
    job = Job(plan.index, plan, WORKLOADS["clips"], workers=16)
    depth, cycle = VidloaderComboPeer().pipeline(job)
    assert cycle >= 16 * 4 and depth > cycle  # 16 workers' units of 4 batches, and more
    assert depth > VidloaderNvdecPeer().pipeline(job)[0]


def test_root_cause():
    try:
        try:
            raise OSError("libnvrtc.so.13: cannot open shared object file")
        except OSError as exc:
            raise RuntimeError("could not load") from exc
    except RuntimeError as exc:
        assert root_cause(exc) == "OSError: libnvrtc.so.13: cannot open shared object file"


# -- harness ---------------------------------------------------------------------------------


def test_steady_window_skips_the_rest_of_a_burst():
    # Bursts of 4 batches every second; warm-up ends inside the first burst.
    arrivals = [t + 0.001 * k for t in (1.0, 2.0, 3.0, 4.0) for k in range(4)]
    s, e = steady_window(arrivals, warmup=2)
    assert s == 3 and e == 15  # 12 batches in 3 s: 4 batches/s, the true rate
    assert steady_window([0.0, 1.0, 2.0, 3.0, 4.0], warmup=2) == (1, 4)


# -- end to end ------------------------------------------------------------------------------


def test_clips_head_decodes_each_clip_as_a_new_video(data_dir):
    """SPDL's workload: each video's first 16 frames as one clip, no clip twice, and a small
    dataset repeated under paths of its own (hard links), so nothing keyed by path (NVDEC's
    GOP and frame caches, open files) serves a repeat."""
    ds = prepare_dataset("W4", "tiny", data_dir=data_dir)
    index = load_index(ds)
    plan = make_plan(WORKLOADS["clips-head"], index, ds, batches=12, seed=1)
    clips = [(plan.index[int(v)].path, int(f[0])) for b in plan.batches
             for v, f in zip(b.video_indices, b.frame_indices)]
    assert plan.repeats > 1 and len(clips) == 12 * 8 and len(set(clips)) == len(clips)
    assert {start for _, start in clips} == {0}  # one clip per video: its first 16 frames
    for b in plan.batches:
        for v, f in zip(b.video_indices, b.frame_indices):
            record = plan.index[int(v)]
            assert f.tolist() == list(range(16))
            assert os.path.samefile(record.path, index[int(v) % len(index)].path)
            assert (record.pts[f[-1]] - record.pts[0]) * float(record.time_base) < 0.6
    again = make_plan(WORKLOADS["clips-head"], index, ds, batches=12, seed=1)  # links kept
    assert [r.path for r in again.index] == [r.path for r in plan.index]


def _bench(tmp_path, data_dir, *extra) -> int:
    return main(["--backends", "vidloader,naive", "--scale", "tiny", "--batches", "2",
                 "--warmup", "1", "--workers", "0", "--batch-size", "12", "--max-seconds", "5",
                 "--no-isolate", "--data-dir", str(data_dir), "--out", str(tmp_path), *extra])


def test_every_workload_writes_json_and_png(tmp_path, data_dir, w1, w3):
    assert _bench(tmp_path, data_dir, "--workload", "all", "--note", "test machine") == 0
    for workload in WORKLOADS.values():
        stems = list(tmp_path.glob(f"{workload.name}-W*.json"))  # clips-W4, not clips-head-W4
        assert len(stems) == 1, workload.name
        report = json.loads(stems[0].read_text())
        png = stems[0].with_suffix(".png")
        assert png.stat().st_size > 1000 if HAVE_MATPLOTLIB else not png.exists()
        assert report["command"].startswith("vidloader bench --workload all")
        env = report["environment"]
        assert {"cpu", "logical_cores", "gpus", "gpu_driver", "libraries", "note"} <= set(env)
        assert env["note"] == "test machine" and "torch" in env["libraries"]
        runs = {r["backend"]: r for r in report["runs"]}
        assert set(runs) == {"vidloader", "naive"}
        if workload.name == "relaxed" and runs["vidloader"]["status"] == "skipped":
            assert "GopShuffle" in runs["vidloader"]["reason"]
            continue
        for run in runs.values():
            assert run["status"] == "ok", run
            assert set(run) >= RUN_KEYS, RUN_KEYS - set(run)
            assert run["frames_per_s"] > 0 and run["decoded_per_delivered"] >= 1
        assert report["best_peer"] == "naive"
        assert runs["naive"]["ratio_to_best_peer"] == 1.0
    section = markdown_section(load_reports(tmp_path), base=tmp_path)
    assert "## Performance" in section and "](random-W1-tiny.json)" in section


def test_isolated_run_with_a_worker(data_dir, w1):
    cfg = RunConfig("random", "vidloader", "W1", "tiny", str(data_dir), batches=3, warmup=1,
                    workers=1, batch_size=16, max_seconds=5)
    result = run_isolated(cfg, timeout_s=120)
    assert result["status"] == "ok", result
    assert result["batch_shape"] == [16, 224, 224, 3]
    assert result["cpu_cores_busy"] > 0 and result["peak_host_memory_bytes"] > 50 * 2**20


def test_register_bench_adds_the_subcommand():
    parser = argparse.ArgumentParser()
    register_bench(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["bench", "--workload", "clips", "--scale", "tiny"])
    assert args.workload == "clips" and callable(args.func)


def test_merge_run_joins_per_backend_reports_with_ratios(tmp_path):
    """gpu_run.sh benches each backend in its own process and JSON: the README table merges
    them per workload, with ratios across the merged runs and each figure linking its file."""
    from vidloader.bench._markdown import merge_run
    from vidloader.bench._report import SCHEMA

    env = {"cpu": "X", "logical_cores": 16, "gpus": [{"name": "G"}], "gpu_driver": "1"}

    def report(backend, fps, ceiling=False, workload="sequential", digest="d1"):
        run = {"backend": backend, "status": "ok", "frames_per_s": fps, "ceiling": ceiling,
               "gpu_util_pct": 5.0, "nvdec_util_pct": 80.0}
        return {"schema": SCHEMA, "command": f"bench {backend}", "environment": env,
                "workload": {"name": workload, "description": workload},
                "dataset": {"name": "W1", "scale": "gpu-quick", "videos": 1, "sizes": ["1x1"],
                            "codecs": ["h264"], "gop": [30], "digest": digest},
                "settings": {"workers": 16}, "best_peer": None, "runs": [run]}

    files = {"a/seq.json": report("pynvc-threads", 2000.0, ceiling=True),
             "b/seq.json": report("vidloader-nvdec", 1900.0),
             "c/rand.json": report("pynvc-simple", 30.0, workload="random"),
             "d/rand.json": report("vidloader-nvdec", 450.0, workload="random")}
    for name, rep in files.items():
        (tmp_path / name).parent.mkdir()
        (tmp_path / name).write_text(json.dumps(rep))
    merged = {r["workload"]["name"]: (paths, r) for paths, r in merge_run(load_reports(tmp_path))}
    seq = {r["backend"]: r for r in merged["sequential"][1]["runs"]}
    assert seq["vidloader-nvdec"]["ratio_to_ceiling"] == pytest.approx(0.95)
    rand = {r["backend"]: r for r in merged["random"][1]["runs"]}
    assert rand["vidloader-nvdec"]["ratio_to_best_peer"] == pytest.approx(15.0)
    section = markdown_section(list(merged.values()), base=tmp_path, heading="", preamble=False)
    assert "| × ceiling |" in section and "| 0.95 |" in section
    assert "](d/rand.json)" in section and "](c/rand.json)" in section
    files["e/other.json"] = report("x", 1.0, digest="d2")
    (tmp_path / "e").mkdir()
    (tmp_path / "e/other.json").write_text(json.dumps(files["e/other.json"]))
    with pytest.raises(ValueError, match="different datasets"):
        merge_run(load_reports(tmp_path))


# -- the command line ------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["run", "sweep", "probe", "agreement", "tradeoff", "table"])
def test_every_subcommand_has_help(command, capsys):
    with pytest.raises(SystemExit) as exc:
        main([command, "--help"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: python -m vidloader.bench {command}")


def test_run_is_the_default_subcommand():
    parser = argparse.ArgumentParser()
    register_bench(parser.add_subparsers(dest="command"))
    argv = ["--workload", "clips", "--backends", "naive", "--scale", "small", "--no-plot"]
    before = vars(parser.parse_args(["bench", *argv]))
    after = vars(parser.parse_args(["bench", "run", *argv]))
    assert before.pop("bench_command") is None and after.pop("bench_command") == "run"
    assert before.pop("func").module == after.pop("func").module == "_run"
    assert before == after


def test_table_prints_the_section_of_recorded_runs(capsys):
    from pathlib import Path

    results = Path(__file__).resolve().parent.parent / "benchmarks" / "results" / "cpu"
    assert main(["table", "--results", str(results), "--top-level"]) == 0
    assert "## Performance" in capsys.readouterr().out


def test_sweep_configs_pass_nvdec_options_through():
    from vidloader.bench._sweep import parse_configs
    from vidloader.errors import ConfigError

    assert parse_configs("sequential:24,random:16:skip_nonref=0:units_decoding=2") == [
        ("sequential", 24, {}), ("random", 16, {"skip_nonref": 0, "units_decoding": 2})]
    with pytest.raises(ConfigError, match="unknown sampler 'nope'"):
        parse_configs("nope:16")


def test_backend_names_match_their_adapters():
    from vidloader.bench._backends import backend_names

    assert all(make_peer(name).name == name for name in backend_names())


def test_monitor_reads_memory_at_most_once_a_second_and_never_for_the_demo(monkeypatch):
    """Reading PSS (each process's smaps) every 200 ms took a fifth of the demo's throughput
    on 2 cores (181 against 226 frames/s): the demo reads none, the benchmarks once a second."""
    from vidloader.bench import _monitor

    reads = []
    clock = [1000.0]
    monkeypatch.setattr(_monitor.time, "monotonic", lambda: clock[0])
    demo = _monitor.Monitor(memory_seconds=None)
    bench = _monitor.Monitor()
    for tree in (demo.tree, bench.tree):
        monkeypatch.setattr(tree, "_memory", lambda p: reads.append(p) or 1 << 20)
    for _ in range(3):
        demo._sample()
    assert reads == []
    rounds = 0
    for _ in range(10):  # 2 s of 200 ms samples
        before = len(reads)
        bench._sample()
        rounds += len(reads) > before  # a reading: one per process of the tree
        clock[0] += 0.2
    assert 2 <= rounds <= 3
    assert bench.summary(1000.0, 1002.0)["peak_host_memory_bytes"] >= 1 << 20
    assert demo.summary(1000.0, 1000.0).get("peak_host_memory_bytes") is None


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="named segments in /dev/shm")
def test_monitor_counts_the_demux_segments_no_process_maps_yet():
    """A part a demux worker sent and the loader has not received is a named segment that
    no process maps: in no PSS. The host memory counts it (4.0-4.6 GiB of 6.2-6.9 on 1080p
    random frames before session 20, when it did not)."""
    from vidloader.bench import _monitor
    from vidloader.pipeline._payloads import SharedPayloads, discard, segment_prefix

    unrelated = SharedPayloads()  # not a pool's: not counted
    unrelated.write(bytes(1 << 20))
    sent = SharedPayloads(prefix=segment_prefix())
    sent.write(bytes(3 << 20))
    segment, _ = sent.pack([])  # the worker's mapping is closed: only the file holds it
    try:
        monitor = _monitor.Monitor(memory_seconds=0.0)
        monitor._sample()
        monitor._sample()  # the summary needs two samples
        only_pss = monitor.tree.sample(True)
        summary = monitor.summary(0.0, float("inf"))
    finally:
        discard(segment)
        unrelated.discard()
    assert 3 << 20 <= summary["peak_unread_segment_bytes"] < 4 << 20
    pss = sum(m for _, m in only_pss.values())
    assert summary["peak_host_memory_bytes"] >= pss + (3 << 20) - (1 << 20)  # PSS moves a little


@pytest.mark.parametrize("children_files", [True, False])
def test_monitor_finds_the_process_tree_with_or_without_children_files(monkeypatch, children_files):
    """The tree of the loader's process (a child and its own child here) is found through the
    threads' ``children`` files, reading nothing of the machine's other processes, and by the
    machine-wide walk (psutil's, or ``/proc``'s) where they are off: the same processes."""
    import subprocess
    import sys

    from vidloader.bench import _monitor

    monkeypatch.setattr(_monitor, "CHILDREN_FILES", children_files)
    if children_files and _monitor._has_children_files():
        # psutil's machine-wide walk fails: the tree must come from the children files alone.
        import psutil

        def no_walk(*a, **k):
            raise AssertionError("walked the machine's processes")

        monkeypatch.setattr(psutil.Process, "children", no_walk)
    code = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)']); time.sleep(30)"
    child = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.monotonic() + 20
        while True:
            tree = _monitor.Monitor(memory_seconds=None).tree
            pids = set(tree.sample(memory=False))
            grandchildren = [p for p in pids if p not in (os.getpid(), child.pid)]
            if child.pid in pids and grandchildren or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert os.getpid() in pids and child.pid in pids and grandchildren, pids
        if children_files and _monitor._has_children_files():
            assert _monitor.subtree(os.getpid()) is not None
    finally:
        child.kill()
        child.wait()
