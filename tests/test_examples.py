"""Every example under examples/ runs at tiny scale (CI); examples/distributed is run under
torchrun by test_torchrun.py."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _main(relative: str):
    spec = importlib.util.spec_from_file_location(f"example_{relative.replace('/', '_')[:-3]}",
                                                  EXAMPLES / relative)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main


def test_every_example_has_a_readme():
    for folder in (p for p in EXAMPLES.iterdir() if p.is_dir()):
        assert (folder / "README.md").is_file(), folder


def test_train_compares_both_samplers(tmp_path):
    results = _main("train/train.py")(["--tiny", "--data", str(tmp_path)])
    assert list(results) == ["Clips (exact random)", "GopShuffle (relaxed)"]
    assert all(0 <= acc <= 1 for acc in results.values())


def test_speedup_runs_cpu_steps_and_skips_gpu_steps_by_name(tmp_path, capsys):
    results = _main("speedup/speedup.py")(["--tiny", "--data", str(tmp_path)])
    assert len(results) == 5 and all(results[k] > 0 for k in list(results)[:3])
    import torch

    if not torch.cuda.is_available():
        assert results["vidloader nvdec"] is None
        assert "vidloader nvdec" in capsys.readouterr().out.split("skipped: no CUDA GPU")[0]


@pytest.mark.parametrize("read", ["stream", "random"])
def test_multicamera_reads_nvidias_index_json(tmp_path, read):
    out = _main("multicamera/main.py")(["--generate", str(tmp_path), "--group_num", "4",
                                        "--num_workers", "0", "--frame_read_type", read])
    assert len(out["rigs"]) == 3 and all(len(r) == 3 for r in out["rigs"])
    assert out["frames"] == 3 * 40 * 3  # every (clip, frame) once, seen by every camera
    assert out["shape"][1:] == (3, 64, 96, 3)
    if read == "stream":  # the seed's stream order: each row walks one clip, a frame a batch
        steps = [(v0 == v1, f1 - f0) for (va, fa), (vb, fb) in zip(out["order"], out["order"][1:])
                 for v0, v1, f0, f1 in zip(va, vb, fa, fb)]
        assert all(step == 1 for same, step in steps if same)
        assert sum(same for same, _ in steps) >= 0.9 * len(steps)


def test_superres_trains_on_input_and_target_from_one_processing_dict(tmp_path, capsys):
    losses = _main("superres/train.py")(["--tiny", "--data", str(tmp_path)])
    assert len(losses) == 3
    assert "input (8, 3, 3, 12, 16) -> target (8, 3, 48, 64)" in capsys.readouterr().out


def test_images_trains_on_cifar_format_batches_in_dalis_shape(tmp_path, capsys):
    out = _main("images/train.py")(["--tiny", "--data", str(tmp_path)])
    # Classes have their own colours: well above chance (0.1) when labels travel with images.
    assert out["accuracy"] > 0.3 and out["test_images"] == 256 and out["images_per_s"] > 0
    assert "held-out accuracy" in capsys.readouterr().out


def test_imagenet_layout_trains_and_validates_from_a_list(tmp_path, capsys):
    out = _main("images/imagenet.py")(["--tiny", "--data", str(tmp_path)])
    assert out["validation_set"] == "ImageFiles" and out["validation_images"] == 6
    assert out["steps"] == 3 and 0 <= out["accuracy"] <= 1
    assert "validation accuracy" in capsys.readouterr().out
    from vidloader.images import ImageFiles, ImageFolder

    classes = ImageFolder(tmp_path / "train", num_workers=0, progress=False).classes
    val = ImageFiles.from_list(tmp_path / "val" / "val.txt", classes=classes, num_workers=0,
                               progress=False)
    for i, label in enumerate(val.labels.tolist()):  # val_<class>_... listed as that class
        assert Path(val.path(i)).name.startswith(classes[label] + "_")
