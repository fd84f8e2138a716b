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

    A float output is two passes: the cast into the output's layout (one copy), then
    ``x · scale + shift`` per channel in place (the normalisation folded into two constants,
    computed in float32). It was five (cast, divide, subtract, divide, then the layout's
    copy); on the CPU a 224² image's took 1.3 ms of the loader's ~4 ms an image, now ~0.3
    (one thread, session 25).
    """
    x = staged
    layout = proc.layout
    if not is_clip:
        x = x[:, 0]
        layout = layout.replace("t", "")
    src = "thwc" if is_clip else "hwc"
    perm = [0] + [1 + src.index(axis) for axis in layout]
    if proc.dtype == "uint8":
        return x.permute(*perm).contiguous()
    out = torch.empty([x.shape[i] for i in perm], dtype=torch.float32, device=x.device)
    out.copy_(x.permute(*perm))
    if proc.normalized or proc.mean is not None or proc.std is not None:
        # The constants broadcast along the output's channel axis.
        trailing = [1] * (len(layout) - 1 - layout.index("c"))
        scale, shift = (c.view(-1, *trailing) for c in _affine(proc, x.device))
        torch.addcmul(shift, out, scale, out=out)
    # Computed in float32 for accuracy, then cast (float16 normalisation in fp16 loses bits).
    return out if proc.dtype == "float32" else out.to(_TORCH_DTYPES[proc.dtype])


def _affine(proc: Process, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """float32 ``(scale, shift)`` per channel: ``(x / 255 - mean) / std`` as ``x · scale +
    shift`` (without ``/ 255`` unless ``normalized``, each part only where set)."""
    # One value for every channel where neither is set, or where both hold one (it
    # broadcasts to any channel count); a single mean or std is repeated to the other's length.
    mean, std = proc.mean or (), proc.std or ()
    channels = max(len(mean), len(std), 1)
    scale = [1 / 255 if proc.normalized else 1.0] * channels
    shift = [-m for m in _stretch(mean, channels)] if mean else [0.0] * channels
    if std:
        scale = [a / s for a, s in zip(scale, _stretch(std, channels), strict=True)]
        shift = [b / s for b, s in zip(shift, _stretch(std, channels), strict=True)]
    return _constant(scale, device), _constant(shift, device)


def _stretch(values, channels: int) -> list:
    return list(values) * channels if len(values) == 1 else list(values)


def _constant(values, device: torch.device) -> torch.Tensor:
    """float32 ``values`` on ``device``, made once per process (the tensors are tiny)."""
    key = (tuple(float(v) for v in values), str(device))
    tensor = _CONSTANTS.get(key)
    if tensor is None:
        tensor = _CONSTANTS[key] = torch.tensor(key[0], dtype=torch.float32, device=device)
    return tensor
