"""The combo bench's runner (``vidloader.bench._combo_run``): a pair of variants measured at
once in two processes, and the ratios it reports. Runs on the CPU with ``--device cpu``."""

from __future__ import annotations

import json

import pytest

from vidloader.bench import _combo_run
from vidloader.bench._datasets import prepare_dataset


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("combo-run-data")
    prepare_dataset("W1", "tiny", data_dir=d)
    return d


def test_a_pair_runs_both_variants_at_once_and_sums_their_windows(tmp_path, data_dir):
    out = tmp_path / "pair.json"
    _combo_run.main(["--scale", "tiny", "--workers", "1", "--device", "cpu", "--workloads", "W1-random",
                     "--variants", "cpu+cpu@5~1", "--warmup-s", "0.5", "--window-s", "0.5", "--windows", "2",
                     "--pair-slack-s", "8", "--data-dir", str(data_dir), "--out", str(out)])
    pair = json.loads(out.read_text())["results"]["W1-random"]["cpu+cpu@5~1"]
    sides = pair["sides"]
    assert list(sides) == ["cpu", "cpu@5~1"]
    for side in sides.values():
        assert len(side["frames_per_s_windows"]) == 2 and min(side["frames_per_s_windows"]) > 0
        # both children waited for the common start: neither began its windows long after it
        assert side["started_late_s"] < 5
    assert sides["cpu@5~1"]["process_nice"] - sides["cpu"]["process_nice"] == 5
    cores = sides["cpu"]["process_cores"]
    # off the first core where two or more would remain (the 2-core CI machine keeps both)
    assert sides["cpu@5~1"]["process_cores"] == (cores[1:] if len(cores) >= 3 else cores)
    summed = [a + b for a, b in zip(*(s["frames_per_s_windows"] for s in sides.values()))]
    assert pair["frames_per_s_windows"] == pytest.approx(summed)
    assert sum(pair["share_by_executor_timed"].values()) == pytest.approx(1.0)


def test_ratios_divide_combos_by_each_alone_and_by_the_pair():
    row = {"cpu": {"frames_per_s": 100.0}, "nvdec": {"frames_per_s": 300.0},
           "cpu+nvdec": {"frames_per_s": 320.0}, "combo": {"frames_per_s": 288.0}}
    _combo_run._ratios("W", row)
    assert row["combo"]["over_sum"] == pytest.approx(0.72)
    assert row["combo"]["over_pair"] == pytest.approx(0.9)
    assert row["cpu+nvdec"]["over_sum"] == pytest.approx(0.8)
    assert "over_pair" not in row["cpu+nvdec"] and "over_sum" not in row["cpu"]
    for v in row.values():
        v.update(frames_per_s_windows=[v["frames_per_s"]], share_by_executor_timed={}, combo_cpu_idle_s={})
    assert "over_sum 0.720 over_pair 0.900" in _combo_run.summary_lines(row)[3]


def test_a_side_names_its_variant_niceness_and_cores_kept_off():
    assert _combo_run._side("cpu") == ("cpu", 0, 0)
    assert _combo_run._side("cpu@10") == ("cpu", 10, 0)
    assert _combo_run._side("cpu@10~4") == ("cpu", 10, 4)
    assert _combo_run._side("nvdec~2") == ("nvdec", 0, 2)


def test_a_sides_setup_sets_its_niceness_and_cores(monkeypatch):
    import os

    calls = []
    monkeypatch.setattr(os, "nice", lambda n: calls.append(("nice", n)))
    monkeypatch.setattr(os, "sched_setaffinity", lambda pid, cores: calls.append(("cores", tuple(cores))))
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(6)))
    monkeypatch.setattr("vidloader.pipeline._combo._siblings", lambda c: {c})
    _combo_run._side_setup("cpu@7~2")()
    assert calls == [("nice", 7), ("cores", (2, 3, 4, 5))]
    calls.clear()
    _combo_run._side_setup("nvdec")()
    assert calls == []


@pytest.mark.parametrize("variants", ["cpu+gpu", "cpu@10", "cpu+nvdec@x", "combo~2"])
def test_unknown_sides_of_a_pair_are_refused(tmp_path, variants):
    with pytest.raises(SystemExit):
        _combo_run.main(["--variants", variants, "--device", "cpu", "--out", str(tmp_path / "x.json")])


def test_a_failing_side_stops_the_other_and_the_run_goes_on(tmp_path, data_dir):
    """NVDEC cannot start on this machine (no GPU): its process fails, the CPU side's is
    stopped at once rather than left measuring, and the variants after the pair still run."""
    import psutil

    out = tmp_path / "pair.json"
    _combo_run.main(["--scale", "tiny", "--workers", "1", "--device", "cpu", "--workloads", "W1-random",
                     "--variants", "cpu+nvdec,cpu", "--warmup-s", "0.5", "--window-s", "0.5",
                     "--windows", "1", "--pair-slack-s", "60", "--data-dir", str(data_dir),
                     "--out", str(out)])
    row = json.loads(out.read_text())["results"]["W1-random"]
    assert "exited" in row["cpu+nvdec"]["error"] and row["cpu"]["frames_per_s"] > 0
    assert not [p for p in psutil.Process().children(recursive=True) if "_combo_run" in " ".join(p.cmdline())]


def test_a_variant_run_twice_keeps_both_rows_and_patched_functions_are_named(tmp_path, data_dir, monkeypatch):
    """A variant named twice (the default before and after the others, to see the machine
    drift) gets a second row, not one overwriting the first; a variant patching a function
    (``nvdec-notap``) stores its name in the JSON's settings."""
    monkeypatch.setitem(_combo_run.VARIANTS, "cpu-notap",
                        ({"backend": "cpu"}, {"decoding.nvdec._status_tap:enabled": _combo_run._tap_off}))
    out = tmp_path / "twice.json"
    _combo_run.main(["--scale", "tiny", "--workers", "1", "--device", "cpu", "--workloads", "W1-random",
                     "--variants", "cpu,cpu-notap,cpu", "--warmup-s", "0.3", "--window-s", "0.3",
                     "--windows", "1", "--data-dir", str(data_dir), "--out", str(out)])
    row = json.loads(out.read_text())["results"]["W1-random"]
    assert list(row) == ["cpu", "cpu-notap", "cpu#2"]
    assert all(v["frames_per_s"] > 0 for v in row.values())
    assert row["cpu-notap"]["settings"]["decoding.nvdec._status_tap:enabled"] == "_tap_off"
    from vidloader.decoding.nvdec import _status_tap
    assert _status_tap.enabled is not _combo_run._tap_off  # restored after its run


def test_the_clips_head_workload_lists_each_video_under_repeated_paths(data_dir, monkeypatch):
    """Each video's head once per repeat, every repeat under paths of its own (hard links), so
    no cache keyed by path serves a clip twice."""
    from vidloader.bench._datasets import load_index

    dataset, kwargs, transform = _combo_run._workloads()["W4-clips-head"]
    assert dataset == "W4" and kwargs["sampler"].first_seconds == pytest.approx(0.6)
    monkeypatch.setattr(_combo_run, "HEAD_REPEATS", 3)
    index = load_index(prepare_dataset("W1", "tiny", data_dir=data_dir))
    repeated = transform(index)
    assert len(repeated) == 3 * len(index) and len(set(repeated.paths)) == len(repeated)
    assert [r.num_frames for r in repeated] == [r.num_frames for r in index] * 3


def test_ratios_read_a_pair_run_again_by_its_label():
    """A pair run twice is keyed ``LABEL#n`` (``main``): its sides still parse (``nvdec@10#3``
    made ``_side`` fail on ``int('10#3')`` once every variant had run, losing the JSON)."""
    row = {"cpu": {"frames_per_s": 100.0}, "nvdec": {"frames_per_s": 200.0},
           "cpu+nvdec@10": {"frames_per_s": 240.0}, "cpu+nvdec@10#3": {"frames_per_s": 270.0},
           "combo": {"frames_per_s": 290.0}}
    _combo_run._ratios("W1-random", row)
    assert row["cpu+nvdec@10#3"]["over_sum"] == pytest.approx(0.9)
    assert row["combo"]["over_pair"] == pytest.approx(290 / 270)


def test_the_long_stream_workload_walks_every_repeat_of_every_rig(tmp_path_factory, monkeypatch):
    """``W3-stream-long`` lists W3's files ``STREAM_REPEATS`` times and streams the rigs of
    every repeat, each rig's cameras at that repeat's positions (the same files as the rig
    of the first listing)."""
    from vidloader.bench._datasets import load_index
    from vidloader.bench._workloads import rig_positions

    monkeypatch.setattr(_combo_run, "STREAM_REPEATS", 3)
    prepared = prepare_dataset("W3", "tiny", data_dir=tmp_path_factory.mktemp("w3-long"))
    index = load_index(prepared)
    dataset, kwargs, transform = _combo_run._workloads()["W3-stream-long"]
    assert dataset == "W3" and kwargs["batch_size"] == 8
    repeated = transform(index)
    assert len(repeated) == 3 * len(index)
    sampler = kwargs["sampler_for"](repeated, prepared)
    rigs = rig_positions(index, prepared)
    assert len(sampler.rigs) == 3 * len(rigs)
    for k in range(3):
        for base, rig in zip(rigs, sampler.rigs[k * len(rigs):(k + 1) * len(rigs)]):
            assert [repeated.paths[p] for p in rig] == [index.paths[p] for p in base]
            assert min(rig) >= k * len(index) and max(rig) < (k + 1) * len(index)


def test_the_random_multicam_workload_draws_whole_rigs(tmp_path_factory):
    """``W3-random``: uniform (rig, frame) draws over W3's rigs, 8 samples of 6 cameras a
    batch, every row of a sample from one rig at one frame."""
    from vidloader.bench._datasets import load_index

    prepared = prepare_dataset("W3", "tiny", data_dir=tmp_path_factory.mktemp("w3-random"))
    index = load_index(prepared)
    dataset, kwargs, transform = _combo_run._workloads()["W3-random"]
    assert dataset == "W3" and kwargs["batch_size"] == 8 and transform is None
    sampler = kwargs["sampler_for"](index, prepared)
    assert sampler.replacement and sampler.cameras == 6
    plan = sampler.plan_epoch(index, epoch=0, batch_size=8)
    rigs = {tuple(r) for r in sampler.rigs.tolist()}
    batch = plan.batch(0)
    for s in range(8):
        rows = slice(6 * s, 6 * s + 6)
        assert tuple(batch.video_indices[rows].tolist()) in rigs
        assert len(set(batch.frame_indices[rows, 0].tolist())) == 1
