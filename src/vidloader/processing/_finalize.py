"""Photometric processing on the batch's device: dtype, normalisation, layout."""

from __future__ import annotations

import torch

from ._spec import Process

_TORCH_DTYPES = {"uint8": torch.uint8, "float32": torch.float32, "float16": torch.float16}


def finalize(staged: torch.Tensor, proc: Process, *, is_clip: bool) -> torch.Tensor:
    """Turn a staged uint8 ``[B, T, H, W, C]`` batch into the output ``proc`` describes.

    Float conversion happens here, on the target device, so only uint8 crosses PCIe. The
    input must be owned by the caller (not a shared-memory slot): a uint8 output in the
    staged layout is returned as is.
    """
    x = staged
    if proc.dtype != "uint8":
        # Compute in float32 for accuracy, then cast (float16 normalisation in fp16 loses bits).
        x = x.to(torch.float32)
        if proc.normalized:
            x = x / 255.0
        if proc.mean is not None:
            x = x - torch.tensor(proc.mean, dtype=x.dtype, device=x.device)
        if proc.std is not None:
            x = x / torch.tensor(proc.std, dtype=x.dtype, device=x.device)
        x = x.to(_TORCH_DTYPES[proc.dtype])
    layout = proc.layout
    if not is_clip:
        x = x[:, 0]
        layout = layout.replace("t", "")
    src = "thwc" if is_clip else "hwc"
    perm = [0] + [1 + src.index(axis) for axis in layout]
    return x.permute(*perm).contiguous()
