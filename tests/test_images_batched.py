"""Batched crop + resize + flip + normalize (``images/_batched.py``) against the per-image
path, and the GPU pool's decode/augment overlap with a stand-in decoder.

Stated tolerances, against the per-image path on the same windows:
- uint8: at most 1 code value; against the float32 ``interpolate`` path (what CUDA runs)
  under 0.1 % of values differ; against torch's CPU uint8 kernel (16-bit fixed-point
  weights) about 17 % differ, by 1;
- fixed-size windows (``crop="random"``, no resize): equal;
- float (normalisation fused, no uint8 rounding first): within ``0.5/255/std`` (+ float16's
  spacing for float16 outputs) of the per-image path's rounded-then-normalised values.
"""

from __future__ import annotations

import io
import threading

import numpy as np
import pytest
import torch
from PIL import Image

import vidloader.pipeline._image_fill as image_fill
from vidloader import ImageLoader, SequentialFrames, WorkerError
from vidloader.bench._images_resize import float_reference
from vidloader.images import ImageFolder, ImageProcess
from vidloader.images._augment import augment_batch, sample_windows
from vidloader.images._batched import (
    compute_dtype_for,
    crop_flip_gather,
    crop_resize_batch,
    crop_resize_matmul,
    crop_resize_per_image,
)
from vidloader.images._synthetic import cifar_like_pixels, natural_like
from vidloader.processing import finalize

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def _images(sizes, seed=0, device="cpu"):
    rng = np.random.default_rng(seed)
    return [torch.from_numpy(natural_like(h, w, rng)).to(device) for h, w in sizes]


# Both orientations, a small image (enlarged) and an odd one.
SIZES = [(375, 500), (500, 375), (90, 100), (301, 457), (375, 500), (200, 640)]


def _windows(proc, images, seed=3):
    hs = np.array([x.shape[0] for x in images])
    ws = np.array([x.shape[1] for x in images])
    return sample_windows(proc, hs, ws, np.arange(len(images), dtype=np.uint64) * 7919 + seed)


@pytest.mark.parametrize("crop", ["random_resized", "center", "none"])
def test_matmul_matches_the_per_image_path(crop):
    images = _images(SIZES * 2)
    proc = ImageProcess(size=(224, 200), crop=crop, random_flip=True)
    windows = _windows(proc, images)
    assert 0 < windows.flip.mean() < 1
    ref = float_reference(images, windows, (224, 200)).int()
    per_image = crop_resize_per_image(images, windows, (224, 200)).int()
    for groups in (1, 3):  # 3: sorted by window area, each group padded to its own largest
        got = crop_resize_matmul(images, windows, (224, 200), groups=groups).int()
        float_diff = (got - ref).abs()
        assert float_diff.max() <= 1 and (float_diff > 0).float().mean() < 1e-3
        assert (got - per_image).abs().max() <= 1


def test_matmul_fixed_windows_with_padding_are_exact():
    pixels = torch.from_numpy(cifar_like_pixels(48, seed=2)[0])
    proc = ImageProcess(crop="random", padding=4, random_flip=True)
    seeds = np.arange(48, dtype=np.uint64) * 31
    windows = sample_windows(proc, 32, 32, seeds)
    assert (windows.top < 0).any() and (windows.left + 32 > 32).any()  # windows leave the image
    got = crop_resize_matmul(list(pixels), windows, (32, 32))
    assert torch.equal(got, augment_batch(pixels, proc, seeds))


@pytest.mark.parametrize("crop, padding", [("random", 4), ("random", 0), ("none", 0)])
def test_gather_from_the_whole_dataset_equals_gather_then_crop(crop, padding):
    """The in-memory GPU path cuts windows straight out of the dataset (one index_select,
    zero outside the image); the same pixels as gathering the images and cropping them."""
    pixels = torch.from_numpy(cifar_like_pixels(40, seed=5)[0])
    indices = np.random.default_rng(1).integers(0, 40, 97)  # repeats, any order
    proc = ImageProcess(crop=crop, padding=padding, random_flip=True)
    seeds = np.arange(97, dtype=np.uint64) * 7 + 3
    windows = sample_windows(proc, 32, 32, seeds)
    assert 0 < windows.flip.mean() < 1
    if padding:
        assert (windows.top < 0).any() and (windows.left + 32 > 32).any()
    got = crop_flip_gather(pixels, indices, windows, (32, 32))
    assert torch.equal(got, augment_batch(pixels[torch.from_numpy(indices)], proc, seeds))


@pytest.mark.parametrize("packing", ["gather", "copies"])
def test_both_ways_of_packing_windows_give_the_same_batch(monkeypatch, packing):
    """Windows are packed into the padded batch by one gather or by a copy per window: the
    same output either way."""
    import vidloader.images._batched as batched

    images = _images(SIZES)
    proc = ImageProcess(size=(64, 48), crop="random_resized", random_flip=True)
    windows = _windows(proc, images)
    monkeypatch.setattr(batched, "PACKING", "copies")
    ref = crop_resize_matmul(images, windows, (64, 48), proc=proc)
    monkeypatch.setattr(batched, "PACKING", packing)
    assert torch.equal(crop_resize_matmul(images, windows, (64, 48), proc=proc), ref)


def test_matmul_on_reduced_decodes_scales_the_windows():
    full = _images(SIZES)
    proc = ImageProcess(size=64, crop="random_resized", random_flip=True)
    windows = _windows(proc, full)
    halves = [x[::2, ::2].contiguous() for x in full]  # stands in for Pillow's draft mode
    scales = np.array([(h.shape[0] / f.shape[0], h.shape[1] / f.shape[1])
                       for h, f in zip(halves, full)])
    got = crop_resize_matmul(halves, windows, (64, 64), scales).int()
    ref = crop_resize_per_image(halves, windows, (64, 64), scales).int()
    assert (got - ref).abs().max() <= 1


@pytest.mark.parametrize("dtype,layout", [("float32", "chw"), ("float16", "hwc")])
def test_fused_normalization_within_half_a_code_value(dtype, layout):
    images = _images(SIZES)
    proc = ImageProcess(size=96, crop="random_resized", random_flip=True, dtype=dtype,
                        normalized=True, mean=MEAN, std=STD, layout=layout)
    windows = _windows(proc, images)
    got = crop_resize_matmul(images, windows, (96, 96), proc=proc)
    ref = finalize(float_reference(images, windows, (96, 96))[:, None], proc, is_clip=False)
    assert got.dtype == ref.dtype and got.shape == ref.shape and got.is_contiguous()
    std = torch.tensor(STD)[:, None, None] if layout == "chw" else torch.tensor(STD)
    bound = 0.5 / 255 / std + 1e-4 + (2 ** -8 if dtype == "float16" else 0)
    diff = (got.float() - ref.float()).abs()
    assert (diff <= bound).all()
    assert diff.max() > 1e-3  # not rounded to uint8 first


def _check_float16_products(device):
    """float16 products (the CUDA default) against float32, before rounding: within 0.3 code
    values, mean under 0.05 (the pixels are exact in float16; the weights and the row
    products carry its 11-bit mantissa; 0.28 at most on the H200, session19-1)."""
    images = _images(SIZES * 4, device=device)
    proc = ImageProcess(size=224, crop="random_resized", random_flip=True, dtype="float32",
                        layout="chw")
    windows = _windows(proc, images)
    exact = crop_resize_matmul(images, windows, (224, 224), proc=proc, compute_dtype=torch.float32)
    half = crop_resize_matmul(images, windows, (224, 224), proc=proc, compute_dtype=torch.float16)
    assert half.dtype == torch.float32
    diff = (half - exact).abs()
    assert diff.max() <= 0.3 and diff.mean() < 0.05
    assert diff.max() > 0  # the products did run in float16


def test_float16_products_within_0_3_code_values():
    _check_float16_products("cpu")
    assert compute_dtype_for(torch.device("cpu")) == torch.float32


def test_auto_keeps_the_per_image_path_on_the_cpu():
    images = _images(SIZES[:3])
    proc = ImageProcess(size=64, crop="random_resized")
    windows = _windows(proc, images)
    assert torch.equal(crop_resize_batch(images, windows, (64, 64)),
                       crop_resize_per_image(images, windows, (64, 64)))


# -- the GPU pool, with a stand-in decoder ---------------------------------------------------

@pytest.fixture(scope="module")
def jpegs(tmp_path_factory):
    """12 JPEGs of mixed sizes in two classes."""
    root = tmp_path_factory.mktemp("jpegs")
    rng = np.random.default_rng(4)
    for k in range(12):
        folder = root / f"class_{k % 2}"
        folder.mkdir(exist_ok=True)
        h, w = SIZES[k % len(SIZES)]
        Image.fromarray(natural_like(h // 4, w // 4, rng)).save(folder / f"{k}.jpg", quality=90)
    return ImageFolder(root, num_workers=0, progress=False)


class PillowBatch:
    """Decodes like Pillow, on ``device``; ``hook(n)`` runs before the n-th call (from 1)."""

    name = "stand-in"

    def __init__(self, device="cpu", hook=None) -> None:
        self.device, self.hook, self.calls = device, hook, 0

    def decode(self, blobs):
        self.calls += 1
        if self.hook is not None:
            self.hook(self.calls)
        return [torch.from_numpy(np.array(Image.open(io.BytesIO(b)).convert("RGB"))).to(self.device)
                for b in blobs]


PROC = ImageProcess(size=48, crop="random_resized", random_flip=True, dtype="float32",
                    normalized=True, mean=MEAN, std=STD, layout="chw")


def test_batch_decoder_gives_the_pillow_loaders_normalized_batches(jpegs):
    pillow = ImageLoader(jpegs, batch_size=4, processing=PROC, num_workers=0)
    batched = ImageLoader(jpegs, batch_size=4, processing=PROC, decoder=PillowBatch())
    for x, y in zip(pillow, batched, strict=True):
        assert y["images"].shape == (4, 3, 48, 48) and y["images"].dtype == torch.float32
        assert torch.equal(x["images"], y["images"])
        assert torch.equal(x["sample_index"], y["sample_index"])


def test_next_batch_decodes_while_this_one_is_augmented(jpegs, monkeypatch):
    """Batch 2's decode must start while batch 1's augmentation is still running: the
    augmentation of batch 1 waits for that start (a sequential pool would time out)."""
    second_decode_started = threading.Event()
    seen = []

    def hook(call):
        if call == 2:
            second_decode_started.set()

    real = image_fill.crop_resize_batch

    def augment(*args, **kwargs):
        if not seen:
            seen.append(second_decode_started.wait(timeout=10))
        return real(*args, **kwargs)

    monkeypatch.setattr(image_fill, "crop_resize_batch", augment)
    loader = ImageLoader(jpegs, batch_size=4, processing=PROC, sampler=SequentialFrames(),
                         decoder=PillowBatch(hook=hook), prefetch=2)
    got = [b["sample_index"].tolist() for b in loader]
    assert seen == [True]
    assert got == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]  # order kept


def test_decoder_error_is_raised_by_the_loader(jpegs):
    def hook(call):
        if call == 2:
            raise RuntimeError("decoder broke")

    loader = ImageLoader(jpegs, batch_size=4, processing=PROC, decoder=PillowBatch(hook=hook))
    with pytest.raises(WorkerError, match="decoder broke"):
        list(loader)


# -- GPU (run on the device machine) ---------------------------------------------------------

@pytest.mark.cuda
def test_matmul_on_cuda_matches_the_cuda_per_image_path():
    images = _images(SIZES * 4, device="cuda")
    proc = ImageProcess(size=224, crop="random_resized", random_flip=True)
    windows = _windows(proc, images)
    per_image = crop_resize_per_image(images, windows, (224, 224)).int()
    exact = crop_resize_matmul(images, windows, (224, 224), compute_dtype=torch.float32).int()
    diff = (exact - per_image).abs()
    assert diff.max() <= 1 and (diff > 0).float().mean() < 1e-3
    cpu = crop_resize_matmul([x.cpu() for x in images], windows, (224, 224)).int()
    assert (exact.cpu() - cpu).abs().max() <= 1
    # The default on CUDA: float16 products (a value near .5 may round the other way).
    assert compute_dtype_for(images[0].device) == torch.float16
    got = crop_resize_batch(images, windows, (224, 224)).int()
    diff = (got - per_image).abs()
    assert diff.max() <= 1 and (diff > 0).float().mean() < 0.1


@pytest.mark.cuda
def test_float16_products_on_cuda_within_0_3_code_values():
    _check_float16_products("cuda")


@pytest.mark.cuda
def test_cuda_stand_in_decoder_overlapped_pool_matches_pillow(jpegs):
    pillow = ImageLoader(jpegs, batch_size=4, processing=PROC, num_workers=0)
    cuda = ImageLoader(jpegs, batch_size=4, processing=PROC, device="cuda",
                       decoder=PillowBatch(device="cuda"))
    for x, y in zip(pillow, cuda, strict=True):
        assert y["images"].is_cuda
        # uint8 kernel vs float weights (1) plus the skipped rounding (0.5), in code values
        assert ((x["images"] - y["images"].cpu()).abs() * 255 * 0.224 <= 1.5 + 1e-3).all()
