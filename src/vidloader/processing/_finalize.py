"""Photometric processing on the batch's device: dtype, normalisation, layout."""

from __future__ import annotations

import torch

from ._spec import Process

_TORCH_DTYPES = {"uint8": torch.uint8, "float32": torch.float32, "float16": torch.float16}
#: Per-channel constants already on a device, by (values, device): ``torch.tensor(values,
#: device="cuda")`` copies from pageable memory and waits for the stream, i.e. for every
#: kernel queued before it, which serialised a GPU loader's host and device at each batch.
_CONSTANTS: dict[tuple, torch.Tensor] = {}


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
            x = x - _constant(proc.mean, x.device)
        if proc.std is not None:
            x = x / _constant(proc.std, x.device)
        x = x.to(_TORCH_DTYPES[proc.dtype])
    layout = proc.layout
    if not is_clip:
        x = x[:, 0]
        layout = layout.replace("t", "")
    src = "thwc" if is_clip else "hwc"
    perm = [0] + [1 + src.index(axis) for axis in layout]
    return x.permute(*perm).contiguous()


def _constant(values, device: torch.device) -> torch.Tensor:
    """float32 ``values`` on ``device``, made once per process (the tensors are tiny)."""
    key = (tuple(float(v) for v in values), str(device))
    tensor = _CONSTANTS.get(key)
    if tensor is None:
        tensor = _CONSTANTS[key] = torch.tensor(key[0], dtype=torch.float32, device=device)
    return tensor
