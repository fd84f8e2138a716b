"""Session 22 review (helper 83): the NV12 conversion on CUDA, both paths: no host sync
(``set_sync_debug_mode("error")`` on a side stream, with and without ``out=`` slices), the lean
path within one code value of the general one, and their times. Not yet run: needs a GPU
(``python3 benchmarks/diag/nv12_gpu_check.py``)."""

import time

import torch

from vidloader.processing import _nv12
from vidloader.processing._nv12 import nv12_to_rgb_batch

print(torch.__version__, torch.cuda.get_device_name())
dev = "cuda"
h, w, n = 900, 1600, 8
fr = torch.randint(0, 256, (n, h + h // 2, 1792), dtype=torch.uint8, device=dev)
kw = dict(height=h, width=w, matrix="bt709", full_range=False)
out_big = torch.empty((32, h, w, 3), dtype=torch.uint8, device=dev)
for lean in (True, False):
    _nv12.LEAN_UNSCALED = lean
    nv12_to_rgb_batch(fr, **kw)
    nv12_to_rgb_batch(fr, **kw, out=out_big[4:12])
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        s = torch.cuda.Stream()
        with torch.cuda.stream(s):
            nv12_to_rgb_batch(fr, **kw)
            nv12_to_rgb_batch(fr, **kw, out=out_big[4:12])
        print("lean" if lean else "general", "no sync in conversion: OK")
    except Exception as e:
        print("SYNC:", lean, e)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    torch.cuda.synchronize()

orig = _nv12._unscaled_8bit


def bench(name, lean, fn, frames, reps=200, out=None):
    _nv12.LEAN_UNSCALED = lean
    _nv12._unscaled_8bit = fn
    for _ in range(10):
        nv12_to_rgb_batch(frames, **kw, out=out)
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(reps):
        nv12_to_rgb_batch(frames, **kw, out=out)
    host = (time.perf_counter() - t) / reps * 1e6
    torch.cuda.synchronize()
    tot = (time.perf_counter() - t) / reps * 1e6
    print(f"{name:28s} n={frames.shape[0]} host {host:7.1f} us/call  gpu-bound {tot:8.1f} us/call")
    _nv12._unscaled_8bit = orig


for frames in (fr, fr[:1]):
    bench("general", False, orig, frames)
    bench("lean", True, orig, frames)
    bench("lean out=slice", True, orig, frames, out=out_big[4 : 4 + frames.shape[0]])
# small pictures: launch overhead dominates
small = torch.randint(0, 256, (8, 96 + 48, 128), dtype=torch.uint8, device=dev)
kw = dict(height=96, width=128, matrix="bt709", full_range=False)
bench("general small", False, orig, small)
bench("lean small", True, orig, small)
