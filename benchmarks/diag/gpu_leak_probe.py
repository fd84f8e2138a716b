"""Which CUDA tensors outlive an NVDEC loader? (issue 17 item 7: on the H100, 49 loaders of
2 batches each left ``torch.cuda.memory_allocated`` 2.7 GB higher, session8-7/gpu_faults.log.)

Runs create / 2 batches / break / del cycles of an NVDEC loader on four small generated
videos, prints ``memory_allocated`` after each, then lists the CUDA tensors alive that were not
alive after the first cycle, grouped by shape, with a chain of referrers for a few of them::

    PYTHONPATH=$PWD/src:$PWD/.site python3 benchmarks/diag/gpu_leak_probe.py
"""

from __future__ import annotations

import collections
import gc
import sys
import tempfile
import types
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository, for tests/

import vidloader  # noqa: E402
from tests.media import make_small_dataset  # noqa: E402
from vidloader import RandomFrames, VideoLoader  # noqa: E402


def _cuda_tensors() -> dict[int, torch.Tensor]:
    gc.collect()
    out = {}
    for o in gc.get_objects():
        try:
            if isinstance(o, torch.Tensor) and o.is_cuda:
                out[id(o)] = o
        except ReferenceError:
            continue
    return out


def _describe(o) -> str:
    if isinstance(o, dict):
        return "dict(" + ",".join(str(k)[:30] for k in list(o)[:6]) + ")"
    if isinstance(o, (list, tuple, collections.deque)):
        return f"{type(o).__name__}[{len(o)}]"
    if isinstance(o, types.CellType):
        return "cell"
    if isinstance(o, types.FunctionType):
        return f"function {o.__qualname__}"
    return type(o).__module__ + "." + type(o).__qualname__


def _chain(t, depth: int = 6, skip=()) -> list[str]:
    """Referrers of ``t``, then of the first interesting referrer, ``depth`` levels up."""
    out, cur, seen = [], t, {id(skip)}
    for _ in range(depth):
        refs = [r for r in gc.get_referrers(cur) if id(r) not in seen and not isinstance(r, types.FrameType)]
        if not refs:
            break
        out.append(" | ".join(_describe(r) for r in refs[:4]))
        seen.update(id(r) for r in refs)
        seen.add(id(refs))
        cur = refs[0]
    return out


def main() -> None:
    paths = make_small_dataset(Path(tempfile.mkdtemp()), n=4)
    index = vidloader.build_index(paths, num_workers=0, progress=False)
    workers = int(sys.argv[1]) if len(sys.argv) > 1 else 2

    def cycle() -> None:
        loader = VideoLoader(index, sampler=RandomFrames(seed=2), batch_size=8, backend="nvdec",
                             num_workers=workers, nvdec_decoders=4)
        for k, _ in enumerate(loader):
            if k == 1:
                break
        del loader

    cycle()
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    first = _cuda_tensors()
    print("after cycle 1:", torch.cuda.memory_allocated(), "bytes,", len(first), "CUDA tensors", flush=True)
    for k in range(2, 7):
        cycle()
        gc.collect()
        print(f"after cycle {k}:", torch.cuda.memory_allocated(), flush=True)
    now = _cuda_tensors()
    new = [t for i, t in now.items() if i not in first]
    groups = collections.Counter((tuple(t.shape), str(t.dtype), t.untyped_storage().nbytes()) for t in new)
    print(len(new), "new CUDA tensors; by (shape, dtype, storage bytes):")
    for key, n in groups.most_common(12):
        print("  ", n, key)
    for t in new[:3]:
        print("referrers of", tuple(t.shape))
        for line in _chain(t, skip=new):
            print("   <-", line[:300])


if __name__ == "__main__":
    main()
