"""``vidloader prepare``: outputs have the promised GOP structure, reruns resume, failures report."""

from __future__ import annotations

import json

import av
import numpy as np
import pytest

from vidloader.cli.__main__ import main
from vidloader.errors import ConfigError
from vidloader.index import probe_video
from vidloader.prepare import output_size, prepare_dataset
from vidloader.synthetic import VideoSpec, make_video

from .media import reference_frames, write_corrupt


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """Two videos in a tree: long GOPs with B-frames, one with an audio track."""
    root = tmp_path_factory.mktemp("prep_src")
    make_video(root / "a" / "one.mp4", VideoSpec(width=96, height=64, num_frames=30, gop=40,
                                                 bframes=3, audio=True, seed=1))
    make_video(root / "b" / "two.mkv", VideoSpec(width=96, height=64, num_frames=21, gop=40,
                                                 bframes=3, seed=2))
    return root


def _decode_order_pts(path) -> list[int]:
    with av.open(str(path)) as c:
        return [p.pts for p in c.demux(c.streams.video[0]) if p.pts is not None]


def test_outputs_have_fixed_closed_gops_no_bframes_and_video_only(source, tmp_path):
    report = prepare_dataset(source, tmp_path / "out", gop=8, max_size=64, num_workers=0,
                             progress=False)
    assert [f.status for f in report.files] == ["done", "done"]
    one, two = tmp_path / "out" / "a" / "one.mp4", tmp_path / "out" / "b" / "two.mp4"
    for path, frames in ((one, 30), (two, 21)):
        record = probe_video(path)
        assert record.num_frames == frames
        assert record.keyframes.tolist() == list(range(0, frames, 8))
        assert (record.width, record.height, record.pix_fmt) == (64, 42, "yuv420p")
        pts = _decode_order_pts(path)
        assert pts == sorted(pts)  # decode order is display order: no B-frames
        with av.open(str(path)) as c:
            assert len(c.streams) == 1  # the audio track is gone
    change = next(f for f in report.files if f.source.endswith("one.mp4"))
    assert change.streams_dropped == 1 and change.gop_before == 30 and change.gop_after == 30 / 4
    got = reference_frames(two)[10].astype(float)
    want = reference_frames(source / "b" / "two.mkv", size=(42, 64))[10].astype(float)
    assert 10 * np.log10(255**2 / np.mean((got - want) ** 2)) > 25  # the same pictures


def test_bframes_gops_are_closed(source, tmp_path):
    """Each GOP decodes from its own keyframe to the same pixels as a sequential decode."""
    prepare_dataset(source / "a" / "one.mp4", tmp_path, gop=10, bframes=True, num_workers=0,
                    progress=False)
    path = tmp_path / "one.mp4"
    full = reference_frames(path)
    with av.open(str(path)) as c:
        stream = c.streams.video[0]
        keys = [p.pts for p in c.demux(stream) if p.is_keyframe]
    assert len(keys) == 3
    assert _decode_order_pts(path) != sorted(_decode_order_pts(path))  # B-frames are there
    for k, key_pts in enumerate(keys):
        with av.open(str(path)) as c:
            stream = c.streams.video[0]
            c.seek(key_pts, stream=stream, backward=True, any_frame=False)
            frames = sorted((f for f in c.decode(stream)), key=lambda f: f.pts)
            first = [f.to_ndarray(format="rgb24") for f in frames if f.pts >= key_pts][:10]
        np.testing.assert_array_equal(np.stack(first), full[10 * k : 10 * k + len(first)])


def test_rerun_resumes_and_never_leaves_a_partial_file(source, tmp_path):
    out = tmp_path / "out"
    prepare_dataset(source, out, gop=8, num_workers=0, progress=False)
    (out / "b" / "two.mp4").unlink()  # as if killed while writing it:
    (out / "b" / "two.mp4.partial").write_bytes(b"half a file")
    report = prepare_dataset(source, out, gop=8, num_workers=2, progress=False)
    assert {f.source.rsplit("/", 1)[-1]: f.status for f in report.files} == {
        "one.mp4": "skipped", "two.mkv": "done"}
    assert not list(out.rglob("*.partial"))
    assert probe_video(out / "b" / "two.mp4").num_frames == 21


def test_a_bad_file_is_reported_and_leaves_nothing(source, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    write_corrupt(src / "bad.mp4", source / "a" / "one.mp4")
    (src / "empty.mp4").write_bytes(b"")
    report = prepare_dataset(src, tmp_path / "out", num_workers=0, progress=False)
    assert [f.status for f in report.files] == ["failed", "failed"]
    assert all(f.reason for f in report.files)
    assert not list((tmp_path / "out").rglob("*.mp4*"))


def test_refuses_bad_options(source, tmp_path):
    with pytest.raises(ConfigError, match="inside the source"):
        prepare_dataset(source, source / "prepared", progress=False)
    with pytest.raises(ConfigError, match="gop=0"):
        prepare_dataset(source, tmp_path, gop=0, progress=False)
    assert output_size(1920, 1080, 256) == (256, 144)
    assert output_size(96, 64, None) == (96, 64)


def test_cli_writes_a_report_that_reruns_add_to(source, tmp_path, capsys):
    out = tmp_path / "out"
    cmd = ["prepare", str(source / "b"), str(out), "--gop", "5", "-j", "0"]
    assert main(cmd) == 0
    first = json.loads((out / "prepare-report.json").read_text())
    assert first["options"]["gop"] == 5 and first["files"][0]["status"] == "done"
    assert first["files"][0]["run"] == 0 and first["files"][0]["gop_after"] == 21 / 5  # 5 keyframes
    assert "1 re-encoded" in capsys.readouterr().out
    assert main(cmd) == 0  # a rerun skips the file but keeps what its encoding measured
    (entry,) = json.loads((out / "prepare-report.json").read_text())["files"]
    assert {k: v for k, v in entry.items() if k != "skipped_in"} == first["files"][0]
    assert entry["skipped_in"] == [1]
    assert "merged with 1 earlier run(s)" in capsys.readouterr().out
    (out / "two.mp4").unlink()
    assert main(cmd) == 0  # encoded again: the new outcome, the earlier one kept under it
    merged = json.loads((out / "prepare-report.json").read_text())
    (entry,) = merged["files"]
    assert entry["status"] == "done" and entry["run"] == 2
    assert [e["run"] for e in entry["earlier"]] == [0] and entry["earlier"][0]["skipped_in"] == [1]
    assert [(r["done"], r["skipped"]) for r in merged["runs"]] == [(1, 0), (0, 1), (1, 0)]


def test_merge_reads_a_single_run_report_and_keeps_files_it_did_not_see(tmp_path):
    from vidloader.prepare import FileChange, PrepareOptions, PrepareReport, merge_reports

    opts = PrepareOptions(gop=8, bframes=False, max_size=None, codec="h264", crf=20, preset="fast")
    old = PrepareReport("s", "d", opts, [FileChange("s/a.mp4", "d/a.mp4", "done", gop_after=8.0),
                                        FileChange("s/b.mp4", "d/b.mp4", "failed", reason="bad")])
    new = PrepareReport("s", "d", opts, [FileChange("s/b.mp4", "d/b.mp4", "done")])
    merged = merge_reports(json.loads(old.to_json()), new)
    assert [(r["done"], r["failed"]) for r in merged["runs"]] == [(1, 1), (1, 0)]
    a, b = merged["files"]
    assert a["source"] == "s/a.mp4" and a["gop_after"] == 8.0 and "run" not in a
    assert b["status"] == "done" and b["run"] == 1 and b["earlier"][0]["reason"] == "bad"


def test_gop_cost_bench_reports_disk_and_decoding(tmp_path, capsys):
    out = tmp_path / "gop_cost.json"
    assert main(["bench", "gop-cost", "--videos", "2", "--frames", "48", "--gops", "40,8",
                 "--batches", "2", "--batch-size", "8", "--width", "96", "--height", "64",
                 "--size", "32", "--workers", "0", "--data-dir", str(tmp_path / "d"),
                 "--out", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [r["gop"] for r in rows] == [40, 8]
    assert rows[0]["decoded_per_delivered"] > rows[1]["decoded_per_delivered"] >= 1
    assert rows[1]["disk_bytes"] > rows[0]["disk_bytes"]  # keyframes cost bytes
    assert rows[0]["speedup_vs_first"] == 1 and "| 8 |" in capsys.readouterr().out
