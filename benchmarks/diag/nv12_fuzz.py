"""Session 22 review (helper 83): random NV12 pictures (sizes 2-70, odd and even, crops, pitches,
saturated values, every matrix and range) through the lean and the general conversion, on the
CPU or, with ``cuda`` as the first argument, the GPU (``python3 benchmarks/diag/nv12_fuzz.py cuda
400``). Ran on the CPU in session 22 (~1,000 cases, all within one code value)."""

import random
import sys

import torch

from vidloader.processing import _nv12
from vidloader.processing._nv12 import _KR_KB, nv12_to_rgb, nv12_to_rgb_batch

dev = sys.argv[1] if len(sys.argv) > 1 else "cpu"
rng = random.Random(0)
calls = {"lean": 0}
orig = _nv12._unscaled_8bit


def spy(*a, **k):
    calls["lean"] += 1
    return orig(*a, **k)


_nv12._unscaled_8bit = spy


def conv(frames, lean, **kw):
    _nv12.LEAN_UNSCALED = lean
    try:
        return nv12_to_rgb_batch(frames, **kw)
    finally:
        _nv12.LEAN_UNSCALED = True


stats = dict(cases=0, lean=0, diffs=0, maxdiff=0, px=0)
for it in range(int(sys.argv[2]) if len(sys.argv) > 2 else 400):
    h, w = rng.randint(2, 70), rng.randint(2, 70)
    pitch = w + (w % 2) + rng.choice([0, 0, 1, 2, 13])
    n = rng.randint(1, 4)
    kind = rng.choice(["rand", "sat", "extreme"])
    rows = h + (h + 1) // 2
    if kind == "rand":
        fr = torch.randint(0, 256, (n, rows, pitch), dtype=torch.uint8)
    else:
        vals = (
            torch.tensor([0, 1, 16, 235, 240, 254, 255], dtype=torch.uint8)
            if kind == "sat"
            else torch.tensor([0, 255], dtype=torch.uint8)
        )
        fr = vals[torch.randint(0, len(vals), (n, rows, pitch))]
    # sometimes a non-contiguous input: a slice of a wider/larger tensor
    if rng.random() < 0.3:
        big = torch.randint(0, 256, (2 * n, rows + 3, pitch + 5), dtype=torch.uint8)
        big[::2, 1 : rows + 1, 2 : pitch + 2] = fr
        fr = big[::2, 1 : rows + 1, 2 : pitch + 2]
    fr = fr.to(dev)
    if rng.random() < 0.5:
        crop = None
    else:
        top, left = rng.randint(0, h - 1), rng.randint(0, w - 1)
        ch, cw = rng.randint(1, h - top), rng.randint(1, w - left)
        if rng.random() < 0.6:  # make even
            top, left = top - top % 2, left - left % 2
            ch, cw = max(2, ch - ch % 2), max(2, cw - cw % 2)
            if top + ch > h or left + cw > w:
                continue
        crop = (top, left, ch, cw)
    matrix, full = rng.choice(list(_KR_KB)), rng.random() < 0.5
    kw = dict(height=h, width=w, matrix=matrix, full_range=full, crop=crop)
    before = calls["lean"]
    lean = conv(fr, True, **kw)
    used = calls["lean"] > before
    gen = conv(fr, False, **kw)
    win = crop or (0, 0, h, w)
    assert used == (not any(v % 2 for v in win)), (kw, used)
    d = (lean.int() - gen.int()).abs()
    stats["cases"] += 1
    stats["lean"] += used
    stats["maxdiff"] = max(stats["maxdiff"], int(d.max()))
    stats["diffs"] += int((d > 0).sum())
    stats["px"] += d.numel()
    assert d.max() <= 1, (kw, int(d.max()))
    if not used:
        assert torch.equal(lean, gen)
    # out=: contiguous, slice of a batch, channels slice of a 4-channel buffer, transposed view
    shape = lean.shape
    for mk in ("contig", "batchslice", "chan4", "strided"):
        if mk == "contig":
            big = torch.zeros(shape, dtype=torch.uint8, device=dev)
            o = big
        elif mk == "batchslice":
            big = torch.zeros((shape[0] + 3, *shape[1:]), dtype=torch.uint8, device=dev)
            o = big[1 : 1 + shape[0]]
        elif mk == "chan4":
            big = torch.zeros((*shape[:3], 4), dtype=torch.uint8, device=dev)
            o = big[..., :3]
        else:
            big = torch.zeros((shape[0], shape[2], shape[1], 3), dtype=torch.uint8, device=dev)
            o = big.transpose(1, 2)
        _nv12.LEAN_UNSCALED = True
        r = nv12_to_rgb_batch(fr, **kw, out=o)
        assert r is o and torch.equal(o, lean), (mk, kw)
        if mk == "chan4":
            assert int(big[..., 3].max()) == 0
    # single-picture API with out = slot of a batch (what NvdecFrame.to_rgb(out=...) gets)
    slot = torch.zeros((3, *shape[1:]), dtype=torch.uint8, device=dev)
    nv12_to_rgb(fr[0], **kw, out=slot[1])
    assert torch.equal(slot[1], lean[0])
    # uint16 / P016 must not take the lean path
    b = calls["lean"]
    nv12_to_rgb_batch((fr.to(torch.int32) << 8).to(torch.int16).view(torch.uint16), **kw)
    assert calls["lean"] == b
print(dev, stats, "diff fraction", stats["diffs"] / stats["px"])
