"""Processing: NVVL ProcessDesc semantics (geometry, index_map, dtype, normalise, layout)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from vidloader import ConfigError, Process
from vidloader.processing import apply_window, as_outputs, finalize, geometry, sample_transform


def test_size_alone_resizes_straight_to_size():
    g = geometry(Process(size=(224, 224)), 270, 480)
    assert g.decode_hw == (224, 224) and g.out_hw == (224, 224)


def test_short_side_keeps_aspect_then_crops():
    g = geometry(Process(size=112, short_side=128), 270, 480)
    assert g.decode_hw == (128, 228) and g.out_hw == (112, 112)


def test_scale_factor_and_native_size():
    assert geometry(Process(scale=0.25), 1080, 1920).decode_hw == (270, 480)
    assert geometry(Process(), 90, 160).out_hw == (90, 160)


def test_crop_larger_than_frame_is_a_config_error():
    with pytest.raises(ConfigError, match="larger than the resized frame"):
        geometry(Process(size=300, scale=(256, 256)), 480, 640, path="x.mp4")


def test_center_crop_window_and_flip():
    proc = Process(size=(2, 2), scale=(4, 6), random_flip=True)
    g = geometry(proc, 4, 6)
    img = np.arange(4 * 6 * 3, dtype=np.uint8).reshape(4, 6, 3)
    flips = set()
    for seed in range(20):
        tf = sample_transform(proc, g, seed)
        assert (tf.top, tf.left) == (1, 2)
        out = apply_window(img, g, tf)
        expect = img[1:3, 2:4][:, ::-1] if tf.flip else img[1:3, 2:4]
        np.testing.assert_array_equal(out, expect)
        flips.add(tf.flip)
    assert flips == {True, False}


def test_random_crop_is_deterministic_per_seed_and_covers_range():
    proc = Process(size=(2, 2), scale=(6, 6), crop="random")
    g = geometry(proc, 6, 6)
    origins = {(sample_transform(proc, g, s).top, sample_transform(proc, g, s).left) for s in range(200)}
    assert sample_transform(proc, g, 7) == sample_transform(proc, g, 7)
    assert {t for t, _ in origins} == set(range(5)) and {x for _, x in origins} == set(range(5))


def test_torch_window_flip_matches_numpy():
    proc = Process(size=(3, 3), scale=(5, 5), random_flip=True)
    g = geometry(proc, 5, 5)
    img = np.random.default_rng(0).integers(0, 255, (5, 5, 3), dtype=np.uint8)
    for seed in range(10):
        tf = sample_transform(proc, g, seed)
        np.testing.assert_array_equal(
            apply_window(torch.from_numpy(img), g, tf).numpy(), apply_window(img, g, tf)
        )


def test_index_map_slots_and_frames_out():
    proc = Process(index_map=[-1, -1, 0])
    assert proc.frames_out(3) == 1 and [proc.slots(t) for t in range(3)] == [-1, -1, 0]
    assert Process(index_map=[4, 3, 2, 1, 0]).frames_out(5) == 5
    with pytest.raises(ConfigError, match="index_map has 3 entries"):
        proc.frames_out(5)


def test_finalize_dtype_normalize_layout():
    staged = torch.randint(0, 256, (2, 3, 4, 5, 3), dtype=torch.uint8)
    proc = Process(dtype="float32", normalized=True, mean=(0.5, 0.4, 0.3), std=(0.2, 0.2, 0.1), layout="cthw")
    out = finalize(staged.clone(), proc, is_clip=True)
    assert out.shape == (2, 3, 3, 4, 5) and out.dtype == torch.float32
    ref = (staged.float() / 255 - torch.tensor([0.5, 0.4, 0.3])) / torch.tensor([0.2, 0.2, 0.1])
    torch.testing.assert_close(out, ref.permute(0, 4, 1, 2, 3))
    half = finalize(staged.clone(), Process(dtype="float16", layout="tchw"), is_clip=True)
    assert half.dtype == torch.float16 and half.shape == (2, 3, 3, 4, 5)
    single = finalize(staged[:, :1].clone(), Process(layout="tchw"), is_clip=False)
    assert single.shape == (2, 3, 4, 5)


@pytest.mark.parametrize("layout", ["tchw", "cthw", "thwc"])
@pytest.mark.parametrize("is_clip", [True, False])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("normalized, stats", [
    (True, {"mean": (0.485, 0.456, 0.406), "std": (0.229, 0.224, 0.225)}), (True, {}),
    (False, {"mean": (0.485, 0.456, 0.406), "std": (0.229, 0.224, 0.225)}), (False, {}),
    (True, {"mean": (0.5,), "std": (0.2, 0.3, 0.4)}), (True, {"mean": (0.4, 0.5, 0.6), "std": (0.25,)}),
    (True, {"mean": (0.5,)}), (False, {"std": (2.0, 4.0, 8.0)})])
def test_finalize_matches_the_formula_in_every_layout(layout, is_clip, dtype, normalized, stats):
    """The two-pass float path (cast into the layout, then per-channel scale and shift on the
    output's channel axis) gives ``(x / 255 - mean) / std`` in the asked layout, contiguous,
    with one or three values of each."""
    staged = torch.randint(0, 256, (2, 3, 5, 7, 3), dtype=torch.uint8)
    proc = Process(dtype=dtype, normalized=normalized, layout=layout, **stats)
    out = finalize(staged, proc, is_clip=is_clip)
    x = (staged if is_clip else staged[:, 0]).double()
    ref = x / 255 if normalized else x
    if "mean" in stats:
        ref = ref - torch.tensor(stats["mean"], dtype=torch.float64)
    if "std" in stats:
        ref = ref / torch.tensor(stats["std"], dtype=torch.float64)
    axes = layout if is_clip else layout.replace("t", "")
    src = "thwc" if is_clip else "hwc"
    ref = ref.permute(0, *[1 + src.index(a) for a in axes])
    assert out.dtype == getattr(torch, dtype) and out.is_contiguous() and out.shape == ref.shape
    tolerance = 1e-5 if dtype == "float32" else 2e-3
    torch.testing.assert_close(out.double(), ref, rtol=tolerance, atol=tolerance)


def test_nvvl_layout_letter_f_is_accepted():
    assert Process(layout="fchw").layout == "tchw"


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"dtype": "uint8", "normalized": True}, "need dtype"),
        ({"layout": "thw"}, "permutation"),
        ({"crop": "left"}, "crop must be"),
        ({"size": (0, 3)}, "positive"),
        ({"scale": (4, 4), "short_side": 3}, "either"),
        ({"dtype": "float32", "std": (1, 0, 1)}, "std must not"),
    ],
)
def test_invalid_processing_is_a_config_error(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        Process(**kwargs)


def test_as_outputs_forms():
    assert list(as_outputs(None, size=(4, 4))) == ["frames"]
    named = as_outputs({"input": Process(scale=0.25), "target": Process(index_map=[-1, 0])})
    assert list(named) == ["input", "target"]
    with pytest.raises(ConfigError):
        as_outputs(Process(), size=(4, 4))
    with pytest.raises(ConfigError):
        as_outputs({"x": "not a process"})
