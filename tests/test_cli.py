"""The command line: demo, index and info run end to end on generated video."""

from __future__ import annotations

import vidloader
from vidloader.cli.__main__ import main
from vidloader.synthetic import VideoSpec, make_video


def test_info_prints_stream_facts(tmp_path, capsys):
    path = make_video(tmp_path / "a.mp4", VideoSpec(width=64, height=48, num_frames=30, gop=10))
    assert main(["info", str(path)]) == 0
    out = capsys.readouterr().out
    assert "h264" in out and "64x48" in out and "30 (" in out and "GOP length min 10" in out


def test_info_on_a_bad_file_exits_2_naming_it(tmp_path, capsys):
    bad = tmp_path / "bad.mp4"
    bad.write_text("not a video")
    assert main(["info", str(bad)]) == 2
    assert str(bad) in capsys.readouterr().err


def test_index_builds_saves_and_summarises(tmp_path, capsys):
    for i in range(2):
        make_video(tmp_path / f"v{i}.mp4", VideoSpec(width=64, height=48, num_frames=20, seed=i))
    (tmp_path / "broken.mp4").write_bytes(b"\x00" * 100)
    out_file = tmp_path / "idx.npz"
    assert main(["index", str(tmp_path), "-o", str(out_file), "-j", "0"]) == 0
    out = capsys.readouterr().out
    assert "2 videos, 40 frames" in out and "1 rejected" in out and "broken.mp4" in out
    assert len(vidloader.VideoIndex.load(out_file)) == 2


def test_index_says_which_backend_takes_each_file(tmp_path, capsys):
    """The summary's backend split for a Hopper-class NVDEC: 4:4:4 H.264 and HEVC below
    NVDEC's minimum size go to the CPU, each reason printed once with its count."""
    specs = {"a.mp4": VideoSpec(width=64, height=48, num_frames=10, seed=1),
             "b.mp4": VideoSpec(width=64, height=48, num_frames=10, pix_fmt="yuv444p", seed=2),
             "c.mp4": VideoSpec(codec="hevc", width=96, height=64, num_frames=10, seed=3),
             "d.mp4": VideoSpec(codec="hevc", width=96, height=64, num_frames=10, seed=4)}
    for name, spec in specs.items():
        make_video(tmp_path / name, spec)
    assert main(["index", str(tmp_path), "-o", str(tmp_path / "i.npz"), "-j", "0", "--gpu", "turing"]) == 0
    out = capsys.readouterr().out
    assert "NVDEC 1 files, CPU 3" in out
    assert "CPU ×2: HEVC Main (8-bit 4:2:0) 96×64 is below NVDEC's minimum 144×144" in out
    assert "CPU ×1: H.264 High 4:4:4 Predictive (8-bit 4:4:4)" in out


def test_index_cli_knows_every_gpu_generation_table():
    """The CLI lists the generations without importing the caps module (start-up); the two
    lists must not drift apart."""
    from vidloader.cli._index import GENERATIONS
    from vidloader.decoding.nvdec._caps import GENERATION_TABLES

    assert tuple(GENERATION_TABLES) == GENERATIONS


def test_demo_on_synthetic_data_prints_throughput_and_machine(tmp_path, capsys):
    args = ["demo", "--videos", "2", "--batches", "3", "--batch-size", "8", "--size", "32",
            "--workers", "0", "--data-dir", str(tmp_path)]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "throughput:" in out and "frames/s" in out and "CPU:" in out and "GPU:" in out
    load = next(line for line in out.splitlines() if line.startswith("machine load:"))
    assert "load average (1 min)" in load and "other processes used" in load
    assert "this demo gives about 200 frames/s" in out  # what to expect on an idle machine


def test_demo_with_the_combo_prints_each_executors_share(tmp_path, capsys, monkeypatch):
    """``vidloader demo --backend combo`` on the stand-in NVDEC (batches kept on the CPU)."""
    import vidloader.pipeline

    from . import _fake_nvc

    _fake_nvc.install_on_cpu(monkeypatch)
    real = vidloader.pipeline.VideoLoader
    monkeypatch.setattr(vidloader.pipeline, "VideoLoader", lambda *a, **k: real(*a, device="cpu", **k))
    args = ["demo", "--videos", "2", "--batches", "4", "--batch-size", "8", "--size", "32",
            "--workers", "1", "--data-dir", str(tmp_path), "--backend", "combo"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "backend combo" in out and "rows by executor: " in out and "nvdec" in out


def test_help_and_info_import_no_torch(tmp_path):
    """``vidloader --help`` and ``vidloader info`` start fast: nothing they run imports torch."""
    import subprocess
    import sys

    path = make_video(tmp_path / "a.mp4", VideoSpec(width=64, height=48, num_frames=10))
    code = ("import runpy, sys\n"
            "sys.argv = ['vidloader', *sys.argv[1:]]\n"
            "try:\n"
            "    runpy.run_module('vidloader.cli', run_name='__main__')\n"
            "except SystemExit:\n"
            "    pass\n"
            "print('torch imported:', 'torch' in sys.modules)\n")
    for argv in (["--help"], ["bench", "--help"], ["bench", "sweep", "--help"], ["info", str(path)]):
        out = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True,
                             check=True)
        assert out.stdout.splitlines()[-1] == "torch imported: False", argv
