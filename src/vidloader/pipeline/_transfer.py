"""Move a staged batch out of its reusable slot to where the user wants it, in one copy."""

from __future__ import annotations

import torch


class Transfer:
    """Copies staged tensors (views of a slot about to be reused) into owned tensors.

    ``device=None``: an owned CPU tensor (pinned if ``pin_memory``). ``device="cuda:N"``: a
    tensor on that GPU; from pinned memory the copy is non-blocking.
    """

    def __init__(self, device: str | torch.device | None, pin_memory: bool) -> None:
        self.device = torch.device(device) if device is not None else None
        self.pin_memory = pin_memory and torch.cuda.is_available()

    @property
    def to_gpu(self) -> bool:
        return self.device is not None and self.device.type == "cuda"

    def __call__(self, staged: torch.Tensor, rows: torch.Tensor | None = None) -> torch.Tensor:
        if staged.device.type != "cpu":  # already on the GPU (NVDEC): one device copy
            out = staged[rows] if rows is not None else staged.clone()
            return out if self.device is None else out.to(self.device, non_blocking=True)
        if rows is not None:
            staged = staged[rows]  # advanced indexing already copies out of the slot
        if self.to_gpu:
            if self.pin_memory:
                host = torch.empty(staged.shape, dtype=staged.dtype, pin_memory=True)
                host.copy_(staged)
                return host.to(self.device, non_blocking=True)
            return staged.to(self.device)
        if self.pin_memory:
            host = torch.empty(staged.shape, dtype=staged.dtype, pin_memory=True)
            return host.copy_(staged)
        return staged if rows is not None else staged.clone()
