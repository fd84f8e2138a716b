"""``vidloader bench images --workload resize``: batched crop + resize + flip + normalize
against the per-image path (issue 15).

Times the augmentation alone (decoded images in memory, decode excluded: it is the same for
all three) of 224² random-resized crop + flip + normalize to float32 NCHW on ~500×375
images of both orientations, batch 64:

- ``per_image``: ``crop_resize`` per image (torch's uint8 kernel on the CPU, float32
  ``interpolate`` on CUDA), then ``finalize`` (the path before this change);
- ``matmul``: ``crop_resize_matmul`` as the loader runs it (per-image weight matrices, two
  ``bmm``, the batch padded to its largest window; float16 products on CUDA);
- ``fused`` (CUDA): ``crop_resize_fused``, one Triton kernel reading each window where it
  lies (what the loader runs on CUDA where Triton is);
- ``matmul_4_groups``: the same with images sorted by window area in 4 groups, each padded to
  its own largest window (the default before session 19);
- ``matmul_float32``: the same with float32 products (the default on CUDA before session 19);
- ``grid_sample``: per-image affine grids over the padded batch, bilinear (no antialias:
  shown for its error, it cannot match an antialiased shrink).

Errors are against the float32 per-image path (what CUDA computes), in uint8 code values on
the un-normalised output. Usage::

    vidloader bench images --workload resize --device cpu --batch-size 64 --threads 1 \
        --out benchmarks/results/cpu/images
    vidloader bench images --workload resize --device cuda --batch-size 64 \
        --out benchmarks/results/gpu/images
"""

from __future__ import annotations

import functools
import os
import time

import numpy as np
import torch
import torch.nn.functional as F

from ..images._augment import _window, sample_windows
from ..images._batched import crop_resize_fused, crop_resize_matmul, crop_resize_per_image
from ..images._spec import ImageProcess
from ..images._synthetic import natural_like

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def _images(n: int, device: str) -> list[torch.Tensor]:
    rng = np.random.default_rng(0)
    sizes = [(375, 500) if i % 4 else (500, 375) for i in range(n)]
    sizes = [(h + int(rng.integers(-20, 20)), w + int(rng.integers(-20, 20))) for h, w in sizes]
    return [torch.from_numpy(natural_like(h, w, rng)).to(device) for h, w in sizes]


def grid_sample_batch(images, windows, out_hw, proc):
    """Per-image affine grids over a zero-padded batch; bilinear, no antialias."""
    oh, ow = out_hw
    dev, b = images[0].device, len(images)
    hm = max(int(x.shape[0]) for x in images)
    wm = max(int(x.shape[1]) for x in images)
    batch = torch.zeros((b, 3, hm, wm), dtype=torch.float32, device=dev)
    for i, x in enumerate(images):
        batch[i, :, :x.shape[0], :x.shape[1]].copy_(x.permute(2, 0, 1))
    # Output pixel centre (j + ½)·cw/ow + left in pixels → normalised (align_corners=False).
    sx = windows.width / ow * 2 / wm
    sy = windows.height / oh * 2 / hm
    tx = (windows.left + windows.width / 2) * 2 / wm - 1
    ty = (windows.top + windows.height / 2) * 2 / hm - 1
    sign = np.where(windows.flip, -1.0, 1.0)
    theta = np.zeros((b, 2, 3), np.float32)
    theta[:, 0, 0] = sx * ow / 2 * sign
    theta[:, 0, 2] = tx
    theta[:, 1, 1] = sy * oh / 2
    theta[:, 1, 2] = ty
    grid = F.affine_grid(torch.from_numpy(theta).to(dev), (b, 3, oh, ow), align_corners=False)
    out = F.grid_sample(batch, grid, mode="bilinear", padding_mode="zeros", align_corners=False)
    if proc is None:
        return out.round_().clamp_(0, 255).to(torch.uint8).permute(0, 2, 3, 1)
    mean = torch.tensor(MEAN, device=dev)[:, None, None]
    std = torch.tensor(STD, device=dev)[:, None, None]
    return (out / 255 - mean) / std


def float_reference(images, windows, out_hw):
    """The CUDA per-image path, run on these tensors: float32 interpolate, rounded."""
    out = []
    for i, x in enumerate(images):
        top, left, ch, cw, flip = windows[i]
        patch = _window(x, top, left, ch, cw).permute(2, 0, 1)[None].float()
        y = F.interpolate(patch, size=out_hw, mode="bilinear", align_corners=False,
                          antialias=True).round_().clamp_(0, 255).to(torch.uint8)[0]
        y = y.permute(1, 2, 0)
        out.append(y.flip(1) if flip else y)
    return torch.stack(out)


def _time(fn, reps: int, device: str) -> float:
    fn()  # warm-up
    if device == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(reps):
        fn()
    if device == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - start) / reps


def run_resize(args, device: str) -> dict:
    """Time the methods on one batch of ``--batch-size`` images, ``--resize-reps``
    times each after a warm-up; errors against the float32 per-image path."""
    if args.threads:
        torch.set_num_threads(args.threads)
    batch, reps, out_hw = args.batch_size, args.resize_reps, (224, 224)
    images = _images(batch, device)
    proc = ImageProcess(size=224, crop="random_resized", random_flip=True, dtype="float32",
                        normalized=True, mean=MEAN, std=STD, layout="chw")
    hs = np.array([x.shape[0] for x in images])
    ws = np.array([x.shape[1] for x in images])
    windows = sample_windows(proc, hs, ws, np.arange(batch, dtype=np.uint64) * 7919)
    ref = float_reference(images, windows, out_hw).int()
    results = {"batch": batch, "reps": reps, "threads": torch.get_num_threads(),
               "load_average_before": os.getloadavg()}
    methods = {"per_image": crop_resize_per_image, "matmul": crop_resize_matmul,
               **({"fused": crop_resize_fused} if device == "cuda" else {}),
               "matmul_4_groups": functools.partial(crop_resize_matmul, groups=4),
               "matmul_float32": functools.partial(crop_resize_matmul, compute_dtype=torch.float32),
               "grid_sample": None}
    for name, fn in methods.items():
        if fn is None:
            def call(proc=proc):
                return grid_sample_batch(images, windows, out_hw, proc)
            u8 = grid_sample_batch(images, windows, out_hw, None)
        else:
            def call(fn=fn):
                return fn(images, windows, out_hw, proc=proc)
            u8 = fn(images, windows, out_hw)
        diff = (u8.int() - ref).abs()
        seconds = _time(call, reps, device)
        results[name] = {
            "seconds_per_batch": seconds, "images_per_s": batch / seconds,
            "max_abs_diff_u8": int(diff.max()), "share_differing": float((diff > 0).float().mean()),
            "share_off_by_more_than_2": float((diff > 2).float().mean())}
        print(f"{name:<12} {batch / seconds:>9,.0f} images/s  max |diff| {int(diff.max()):>3}  "
              f"differing {float((diff > 0).float().mean()):.2%}", flush=True)
    results["load_average_after"] = os.getloadavg()
    print("load average", results["load_average_before"], "->", results["load_average_after"])
    return results
