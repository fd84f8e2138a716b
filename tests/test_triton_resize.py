"""The fused Triton crop/resize kernel (``images/_triton_resize.py``) and its fallback.

Triton is not on the CPU machine (torch's CPU wheel does not bring it): there the fallback is
tested with stand-in modules, and the kernel itself through Triton's interpreter where Triton
is installed (in a subprocess: the interpreter is chosen when the kernel is defined). The
cuda tests run it on the device machine against the float64 reference and torch's own CUDA
kernel.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from vidloader.images import ImageProcess, _batched
from vidloader.images._augment import sample_windows
from vidloader.images._packed import PackedImages
from vidloader.images._synthetic import natural_like

SIZES = [(375, 500), (500, 375), (90, 100), (301, 457), (375, 500), (200, 640)]


def _images(sizes, seed=0, device="cpu"):
    rng = np.random.default_rng(seed)
    return [torch.from_numpy(natural_like(h, w, rng)).to(device) for h, w in sizes]


def _windows(proc, images, seed=3):
    hs = np.array([x.shape[0] for x in images])
    ws = np.array([x.shape[1] for x in images])
    return sample_windows(proc, hs, ws, np.arange(len(images), dtype=np.uint64) * 7919 + seed)


def _packed(images):
    sizes = np.array([x.shape[:2] for x in images])
    packed = PackedImages.allocate(sizes, images[0].device)
    for row, image in enumerate(images):
        packed[row].copy_(image)
    return packed


@pytest.fixture
def fresh_state(monkeypatch):
    """The module's Triton state as in a new process, restored afterwards."""
    monkeypatch.setattr(_batched, "_triton_state", {"module": None, "failed": None, "ran": False})
    monkeypatch.setattr(_batched, "CUDA_RESIZE", "triton")


def test_without_triton_the_matmuls_take_over_with_a_warning(fresh_state, monkeypatch):
    monkeypatch.setitem(sys.modules, "triton", None)  # not installed
    monkeypatch.setitem(sys.modules, "vidloader.images._triton_resize", None)
    with pytest.warns(RuntimeWarning, match="pip install triton"):
        assert _batched.cuda_resize_engine() == "matmul"
    assert "could not be imported" in _batched._triton_state["failed"]
    images = _images(SIZES[:2])
    windows = _windows(ImageProcess(size=32, crop="random_resized"), images)
    with pytest.raises(_batched.TritonFailed):
        _batched.crop_resize_fused(images, windows, (32, 32))


def test_matmul_setting_never_imports_triton(fresh_state, monkeypatch):
    monkeypatch.setattr(_batched, "CUDA_RESIZE", "matmul")
    monkeypatch.setattr(_batched, "_triton_kernel", lambda: pytest.fail("imported"))
    assert _batched.cuda_resize_engine() == "matmul"


def test_a_launch_that_fails_hands_over_for_good(fresh_state, monkeypatch):
    """No C compiler for Triton's launcher, say: the launch raises, the call says so to its
    caller (which runs the matmuls), a warning names the error and the compiler, and the
    engine is ``"matmul"`` from then on. The same after the kernel has run: a new
    specialisation (another dtype, alignment or GPU) compiles anew, and the launch raises
    before anything is written."""
    calls = []

    def launch(*args, **kwargs):
        calls.append(args)
        raise RuntimeError("Failed to find C compiler")
    monkeypatch.setattr(_batched, "_triton_kernel", lambda: SimpleNamespace(launch=launch))
    images = _images(SIZES[:3])
    windows = _windows(ImageProcess(size=32, crop="random_resized"), images)
    with pytest.warns(RuntimeWarning, match="C compiler.*gcc"), pytest.raises(_batched.TritonFailed):
        _batched.crop_resize_fused(images, windows, (32, 32))
    assert len(calls) == 1 and _batched.cuda_resize_engine() == "matmul"

    _batched._triton_state.update(failed=None, ran=True)
    with pytest.warns(RuntimeWarning, match="failed to run"), pytest.raises(_batched.TritonFailed):
        _batched.crop_resize_fused(images, windows, (32, 32))
    assert _batched.cuda_resize_engine() == "matmul"


def test_cuda_resize_names_are_checked(fresh_state, monkeypatch):
    monkeypatch.setattr(_batched, "CUDA_RESIZE", "matmull")
    with pytest.raises(ValueError, match="'matmull'.*'triton' or 'matmul'"):
        _batched.cuda_resize_engine()


def test_launch_arguments(fresh_state, monkeypatch):
    """What the kernel is given: each image's first pixel in the flat buffer, its size, its
    window (scaled to a reduced decode) and flip; the output's strides as (image, row,
    column, channel) in either layout; the affine coefficients of a float output."""
    seen = {}

    def launch(pixels, params, coef, out, out_hw, strides, *, out_uint8):
        seen.update(pixels=pixels, params=params.numpy(), coef=coef.numpy(), out=out,
                    out_hw=out_hw, strides=strides, out_uint8=out_uint8)
    monkeypatch.setattr(_batched, "_triton_kernel", lambda: SimpleNamespace(launch=launch))
    images = _images(SIZES[:3])
    packed = _packed(images)
    proc = ImageProcess(size=(24, 20), crop="random_resized", random_flip=True, normalized=True,
                        mean=(0.5, 0.4, 0.3), std=(0.2, 0.3, 0.25), dtype="float16", layout="chw")
    windows = _windows(proc, images)
    scales = np.array([[1.0, 1.0], [0.5, 0.5], [1.0, 1.0]])
    out = torch.empty((3, 3, 24, 20), dtype=torch.float16)
    assert _batched.crop_resize_fused(packed, windows, (24, 20), scales, proc=proc, out=out) is out
    top, left, ch, cw = _batched.scaled_windows(windows, scales)
    np.testing.assert_array_equal(seen["params"], np.stack(
        [packed.starts, packed.heights, packed.widths, top, left, ch, cw, windows.flip]))
    assert seen["pixels"] is packed.pixels and seen["out"] is out and not seen["out_uint8"]
    assert seen["strides"] == (3 * 24 * 20, 20, 1, 24 * 20) and seen["out_hw"] == (24, 20)
    np.testing.assert_allclose(seen["coef"], [[1 / 255 / 0.2, 1 / 255 / 0.3, 1 / 255 / 0.25],
                                              [-0.5 / 0.2, -0.4 / 0.3, -0.3 / 0.25]], rtol=1e-6)
    _batched.crop_resize_fused(images, windows, (24, 20))  # a list: concatenated, uint8 HWC
    assert seen["out_uint8"] and seen["strides"] == (24 * 20 * 3, 20 * 3, 3, 1)
    assert seen["pixels"].shape == (sum(h * w for h, w in SIZES[:3]) + 1, 3)  # and a zero pixel
    assert not seen["pixels"][-1].any()
    assert list(seen["params"][0]) == [0, 375 * 500, 375 * 500 * 2]
    with pytest.raises(ValueError, match="missing rows"):
        packed.missing[1] = True
        _batched.crop_resize_fused(packed, windows, (24, 20))


_INTERPRETED = """
import numpy as np, torch
from vidloader.images import ImageProcess, _batched
from vidloader.images._augment import sample_windows
from vidloader.images._packed import PackedImages

rng = np.random.default_rng(0)
sizes = [(50, 37), (40, 60), (30, 30), (23, 71), (12, 9)]
images = [torch.from_numpy(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)) for h, w in sizes]
packed = PackedImages.allocate(np.array(sizes), torch.device("cpu"))
for row, image in enumerate(images):
    packed[row].copy_(image)
cases = [
    ImageProcess(size=24, crop="random_resized", random_flip=True),
    ImageProcess(size=(20, 16), crop="center", normalized=True, mean=(0.5, 0.4, 0.3),
                 std=(0.2, 0.3, 0.25), dtype="float32", layout="chw"),
    ImageProcess(size=40, crop="random_resized", random_flip=True, dtype="float16",
                 normalized=True, layout="chw"),
    ImageProcess(size=(11, 13), crop="random", padding=9, random_flip=True),
]
for proc in cases:
    seeds = np.arange(len(sizes), dtype=np.uint64) * 104729 + 5
    windows = sample_windows(proc, np.array([h for h, _ in sizes]),
                             np.array([w for _, w in sizes]), seeds)
    if proc.crop == "random":  # fixed windows: the matmuls want one size; test padding anyway
        windows.height[:], windows.width[:] = 11, 13
    got = _batched.crop_resize_fused(packed, windows, (proc.out_hw(1, 1)), proc=proc)
    listed = _batched.crop_resize_fused(images, windows, (proc.out_hw(1, 1)), proc=proc)
    ref = _batched.crop_resize_matmul(images, windows, (proc.out_hw(1, 1)), proc=proc,
                                      compute_dtype=torch.float32)
    assert torch.equal(got, listed)
    diff = (got.double() - ref.double()).abs()
    if got.dtype == torch.uint8:
        assert diff.max() <= 1 and (diff > 0).double().mean() < 0.01, (proc, diff.max())
    else:
        assert diff.max() <= 2e-5 + 1e-3 * (got.dtype == torch.float16), (proc, diff.max())
# An in-memory dataset's rows, read in place: as the rows gathered, then the kernel
data = torch.from_numpy(rng.integers(0, 256, (7, 20, 24, 3), dtype=np.uint8))
rows = np.array([3, 0, 3, 6, 2])
proc = ImageProcess(size=(16, 12), crop="random_resized", random_flip=True, normalized=True,
                    dtype="float32", layout="chw")
windows = sample_windows(proc, np.full(5, 20), np.full(5, 24), np.arange(5, dtype=np.uint64))
in_place = _batched.crop_resize_rows(data, rows, windows, (16, 12), proc=proc)
gathered = _batched.crop_resize_fused([data[r] for r in rows], windows, (16, 12), proc=proc)
assert torch.equal(in_place, gathered)
# Adversarial windows: wholly outside the image, larger than it on every side, 1x1, a
# one-row image, against the float32 matmuls
from vidloader.images._augment import Windows
tiny = [images[0], images[1], images[4], torch.from_numpy(rng.integers(0, 256, (1, 9, 3), dtype=np.uint8))]
odd = Windows(np.array([-60, -5, 3, 0]), np.array([-70, -9, 2, 2]), np.array([10, 50, 1, 1]),
              np.array([12, 80, 1, 4]), np.array([False, True, True, False]))
for out_hw in ((1, 1), (7, 13), (24, 24)):
    got = _batched.crop_resize_fused(tiny, odd, out_hw)
    ref = _batched.crop_resize_matmul(tiny, odd, out_hw, compute_dtype=torch.float32)
    assert (got.int() - ref.int()).abs().max() <= 1, out_hw
    assert not got[0].any()  # wholly outside: zeros
# Ties round half to even, as torch's round_: a 2-pixel window of values v, v+1 to 1 pixel
pair = torch.tensor([[[1, 1, 1], [2, 2, 2]], [[253, 253, 253], [254, 254, 254]]], dtype=torch.uint8)
halves = _batched.crop_resize_fused([pair[:1], pair[1:]], Windows(
    np.zeros(2, np.int64), np.zeros(2, np.int64), np.ones(2, np.int64), np.full(2, 2),
    np.zeros(2, bool)), (1, 1))
assert halves[:, 0, 0, 0].tolist() == [2, 254], halves.flatten().tolist()
print("ok", len(cases))
"""


def test_kernel_in_triton_s_interpreter_matches_the_float32_matmuls():
    """The kernel itself, on the CPU through Triton's interpreter: against the float32
    matmuls for resized, flipped, centred, normalised float32/float16 CHW, and padded
    fixed windows (a window past its image's edges reads zeros), from packed images and
    from a list; an in-memory dataset's rows read in place equal the rows gathered."""
    assert "ok 4" in _interpret(_INTERPRETED, timeout=300)


def _interpret(script: str, *, timeout: int) -> str:
    """``script``'s output, run in a new process through Triton's interpreter (chosen when
    the kernel is defined, so not in this one); skipped without Triton."""
    pytest.importorskip("triton")
    env = dict(os.environ, TRITON_INTERPRET="1")
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], env=env,
                          capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


_BIG_OUTPUT = """
import numpy as np, torch
from vidloader.images import _batched
from vidloader.images._augment import Windows

image = torch.from_numpy(np.random.default_rng(0).integers(0, 256, (20, 30, 3), dtype=np.uint8))
# An output past 2**31 elements (strided, memory touched only where written): int64 addresses
big = torch.empty(3 * 2**30 + 64, dtype=torch.uint8)
out = big.as_strided((3, 2, 2, 3), (2**30, 6, 3, 1))
three = [image] * 3
win3 = Windows(np.zeros(3, np.int64), np.zeros(3, np.int64), np.full(3, 8), np.full(3, 8), np.zeros(3, bool))
_batched.crop_resize_fused(three, win3, (2, 2), out=out)
win1 = Windows(*(np.asarray(getattr(win3, f))[:1] for f in ("top", "left", "height", "width", "flip")))
first = _batched.crop_resize_fused(three[:1], win1, (2, 2))[0]
assert all(torch.equal(out[k], first) for k in range(3))
print("ok")
"""


def test_output_addresses_past_2_31_elements_in_triton_s_interpreter():
    """Three images written 2**30 elements apart (a strided view of a 3 GiB buffer): the
    kernel's output addresses are int64 (an int32 ``b · stride`` wrapped before ``out``)."""
    psutil = pytest.importorskip("psutil")
    if psutil.virtual_memory().available < 12 * 2**30:  # the interpreter copies the buffer
        pytest.skip("needs 12 GiB of free memory")
    assert "ok" in _interpret(_BIG_OUTPUT, timeout=600)


# -- GPU (run on the device machine) ---------------------------------------------------------

@pytest.mark.cuda
def test_fused_kernel_on_cuda_matches_the_reference_and_torch():
    """256 ImageNet-sized images, packed as the decoders pack them: random resized crops with
    flips against the float64 reference (within 1, rarely off) and torch's own CUDA kernel
    (``F.interpolate``, float32: within 1); a normalised float16 CHW output against the
    float32 matmuls; fixed windows with padding exact. It is what the loader runs here."""
    from vidloader.bench._images_resize import float_reference

    assert _batched.cuda_resize_engine() == "triton"
    _batched._triton_state["ran"] = False
    images = _images(SIZES * 43, device="cuda")[:256]
    packed = _packed(images)
    proc = ImageProcess(size=224, crop="random_resized", random_flip=True)
    windows = _windows(proc, images)
    got = _batched.crop_resize_batch(packed, windows, (224, 224)).int()
    torch.cuda.synchronize()
    assert _batched._triton_state["ran"] and _batched._triton_state["failed"] is None
    ref = float_reference(images, windows, (224, 224)).int()
    diff = (got.cpu() - ref.cpu()).abs()
    assert diff.max() <= 1 and (diff > 0).float().mean() < 1e-3
    per_image = _batched.crop_resize_per_image(images, windows, (224, 224)).int()
    assert (got - per_image).abs().max() <= 1

    norm = ImageProcess(size=224, crop="random_resized", random_flip=True, normalized=True,
                        mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225), dtype="float16",
                        layout="chw")
    out = torch.empty((256, 3, 224, 224), dtype=torch.float16, device="cuda")
    _batched.crop_resize_batch(packed, windows, (224, 224), proc=norm, out=out)
    exact = _batched.crop_resize_matmul(packed, windows, (224, 224), proc=norm,
                                        compute_dtype=torch.float32)
    assert (out.float() - exact.float()).abs().max() <= 1e-2  # float16's step near 2.6

    small = _images([(32, 32)] * 64, device="cuda")
    pad = ImageProcess(size=32, crop="random", padding=4, random_flip=True)
    fixed = _windows(pad, small)
    got = _batched.crop_resize_fused(small, fixed, (32, 32))
    from vidloader.images._augment import crop_flip_batch
    assert torch.equal(got, crop_flip_batch(torch.stack(small), fixed, (32, 32), 4))


@pytest.mark.cuda
def test_fused_kernel_runs_on_the_current_stream_of_its_device():
    """Launched on torch's current stream: a batch written on a side stream is complete once
    that stream is synchronised, and equals the default stream's."""
    images = _images(SIZES * 20, device="cuda")
    packed = _packed(images)
    proc = ImageProcess(size=224, crop="random_resized", random_flip=True)
    windows = _windows(proc, images)
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        got = _batched.crop_resize_fused(packed, windows, (224, 224))
    side.synchronize()
    assert torch.equal(got, _batched.crop_resize_fused(packed, windows, (224, 224)))


@pytest.mark.cuda
def test_in_memory_resizing_crops_on_cuda_within_tolerance_of_the_cpu(tmp_path):
    """An in-memory dataset (CIFAR format) with random resized crops on the GPU goes through
    the fused kernel, reading rows in place: within 1 code value of the CPU's uint8 kernel,
    and normalised floats within 1.5 code values (the CPU rounds to uint8 first)."""
    from vidloader import ImageLoader
    from vidloader.images import CIFAR10
    from vidloader.images._synthetic import write_cifar10

    root = write_cifar10(tmp_path, num_train=256, num_test=16)
    ds = CIFAR10(root)
    for dtype, std in (("uint8", None), ("float32", (0.25, 0.25, 0.25))):
        proc = ImageProcess(size=24, crop="random_resized", random_flip=True, dtype=dtype,
                            normalized=std is not None, mean=(0.5,) * 3 if std else None,
                            std=std, layout="chw")
        cpu = list(ImageLoader(ds, batch_size=64, processing=proc))
        gpu = list(ImageLoader(ds, batch_size=64, processing=proc, device="cuda"))
        for x, y in zip(cpu, gpu, strict=True):
            diff = (x["images"].double() - y["images"].cpu().double()).abs().max()
            bound = 1 if std is None else 1.5 / 255 / 0.25 + 1e-5
            assert float(diff) <= bound, (dtype, float(diff))
    assert _batched._triton_state["ran"]
