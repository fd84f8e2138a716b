"""Where the GPU JPEG pipeline's budget goes, and what a float16 resize changes (issue 15).

The worker pool (session 18) stays at ~10.6k images/s with 2 to 8 workers while the decode
alone reaches 23.6k in 4 processes, and session 17 saw the decode fall from 10.6k to 1.3k
beside large matrix products on another stream (``session17-8``): the augmentation's float32
``bmm`` may be what the decoders queue behind. This measures, in one call:

- ``augment``: the batched crop + resize + flip + normalize (224² random resized crop,
  float32 NCHW, batch 256) on decoded batches held on the GPU, in float32 and float16 products:
  host ms and GPU ms (CUDA events) a batch, images/s unsynchronised, and the float16 output's
  difference from the float32 one, in code values;
- ``decode``: ``decode_files`` (nvImageCodec opens the files) and ``decode`` of bytes read
  beforehand, each batch synchronised; then ``decode_files`` beside an augmentation loop on a
  second thread and stream, float32 and float16;
- ``loader``: ``ImageLoader(decoder="nvimgcodec")`` with K worker processes, for the code
  before this change (``.before/``, if present) and after it, each in a fresh process:
  images/s over a timed window, the loader process's CPU share, the machine's CPU share, and
  ``nvidia-smi dmon``'s SM and JPEG-engine shares; then again under MPS where
  ``nvidia-cuda-mps-control`` exists.

Usage (on the device): ``python3 benchmarks/diag/jpeg_budget_probe.py [files] [seconds]
[--loaders "label:folder:K,K;..."] [--no-stages | --augment-only] [--no-mps]``; a loader run's folder holds
the ``vidloader`` package it imports (``src``, or a patched copy); writes
``$OUT/jpeg_budget_probe.json``.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

BATCH = 256
HERE = Path(__file__).resolve()
REPO = HERE.parents[2]
FOLDER = "/tmp/jpeg-budget"


# -- machine counters ----------------------------------------------------------------------------

def _cpu_ticks() -> tuple[int, int]:
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields) - idle, sum(fields)


def _self_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


class Dmon:
    """``nvidia-smi dmon -s u`` in the background: mean of each column over the window."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        try:
            self.proc = subprocess.Popen(["nvidia-smi", "dmon", "-s", "u", "-d", "1"],
                                         stdout=subprocess.PIPE, text=True)
        except OSError:
            self.proc = None
            return
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line)

    def stop(self) -> dict:
        if self.proc is None:
            return {}
        self.proc.terminate()
        self.proc.wait()
        header = next((ln.lstrip("#").split() for ln in self.lines if ln.startswith("# gpu")), None)
        rows = [ln.split() for ln in self.lines if not ln.startswith("#")]
        if not header or not rows:
            return {}
        out = {}
        for k, name in enumerate(header):
            vals = [float(r[k]) for r in rows if len(r) == len(header) and r[k].replace(".", "").isdigit()]
            if name != "gpu" and vals:
                out[name] = round(sum(vals) / len(vals), 1)
        return out


# -- one loader in this process (run as a child) --------------------------------------------------

def loader_row(workers: int, seconds: float) -> dict:
    import torch
    from jpeg_workers_sweep import warm_jpeg_loader  # this folder: the script's own

    from vidloader.images import ImageFolder

    loader, it, first_s = warm_jpeg_loader(ImageFolder(FOLDER, progress=False), workers)
    dmon = Dmon()
    busy0, total0 = _cpu_ticks()
    self0 = _self_cpu_s()
    start, n = time.perf_counter(), 0
    while time.perf_counter() - start < seconds:
        n += next(it)["images"].shape[0]
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    busy1, total1 = _cpu_ticks()
    row = {"workers": workers, "images_per_s": round(n / elapsed, 1), "images": n,
           "seconds": round(elapsed, 3), "first_batch_s": round(first_s, 2),
           "loader_process_cpu": round((_self_cpu_s() - self0) / elapsed, 3),
           "machine_cpu": round((busy1 - busy0) / max(1, total1 - total0), 3),
           "dmon": dmon.stop()}
    loader.shutdown()
    return row


def _child_loader(src: Path, workers: int, seconds: float, env_extra: dict | None = None) -> dict:
    env = dict(os.environ)
    site = env.get("PYTHONPATH", "").split(":")
    env["PYTHONPATH"] = ":".join([str(src)] + [p for p in site if p and not p.endswith("/src")])
    env.update(env_extra or {})
    out = subprocess.run([sys.executable, str(HERE), "--loader", str(workers), str(seconds)],
                         env=env, capture_output=True, text=True, timeout=180)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if out.returncode or not lines:
        return {"workers": workers, "error": (out.stderr or out.stdout)[-1500:]}
    return json.loads(lines[-1])


# -- stages in this process ----------------------------------------------------------------------

def _augment_times(augment, batches: int, seconds: float) -> dict:
    """Median host and GPU (CUDA events) ms of ``augment(k)`` a batch, each synchronised,
    then images/s of back-to-back calls."""
    import numpy as np
    import torch

    for k in range(batches):
        augment(k)
    torch.cuda.synchronize()
    host, gpu = [], []
    for k in range(batches):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        e0.record()
        t = time.perf_counter()
        augment(k)
        host.append(time.perf_counter() - t)
        e1.record()
        e1.synchronize()
        gpu.append(e0.elapsed_time(e1))
    t, n = time.perf_counter(), 0
    while time.perf_counter() - t < seconds:
        augment(n % batches)
        n += 1
    torch.cuda.synchronize()
    return {"host_ms": round(1e3 * float(np.median(host)), 2), "gpu_ms": round(float(np.median(gpu)), 2),
            "images_per_s": round(n * BATCH / (time.perf_counter() - t), 1)}


def _decode_rate(fn, inputs, seconds: float, beside=None) -> dict:
    """images/s of ``fn(batch)`` on ``inputs`` in turn, each synchronised; with ``beside`` (a
    call of one augmentation), that call looping on a second thread and stream meanwhile."""
    import torch

    stop, loops = threading.Event(), [0]
    thread = None
    if beside is not None:
        def loop():
            stream = torch.cuda.Stream()
            with torch.cuda.stream(stream):
                while not stop.is_set():
                    beside()
                    loops[0] += 1
                    stream.synchronize()
        thread = threading.Thread(target=loop)
        thread.start()
        time.sleep(0.5)
    t, n, k = time.perf_counter(), 0, 0
    while time.perf_counter() - t < seconds:
        images = fn(inputs[k % len(inputs)])
        torch.cuda.current_stream().synchronize()
        n += sum(x is not None for x in images)
        k += 1
    elapsed = time.perf_counter() - t
    stop.set()
    if thread is not None:
        thread.join()
    row = {"images_per_s": round(n / elapsed, 1), "ms_per_batch": round(1e3 * elapsed / k, 2)}
    if beside is not None:
        row["augment_batches_per_s"] = round(loops[0] / (elapsed + 0.5), 1)
    return row


def _stages(seconds: float, augment_only: bool = False) -> dict:
    import numpy as np
    import torch

    from vidloader.bench._images import _rrc_proc
    from vidloader.images import ImageFolder
    from vidloader.images._augment import sample_windows
    from vidloader.images._batched import crop_resize_matmul
    from vidloader.images._nvimgcodec import NvImageCodecDecoder

    folder = ImageFolder(FOLDER, progress=False)
    paths = [folder.path(i) for i in range(len(folder))]
    chunks = [paths[k * BATCH:(k + 1) * BATCH] for k in range(len(paths) // BATCH)]
    decoder = NvImageCodecDecoder(torch.device("cuda", 0))
    proc = _rrc_proc()
    held = [decoder.decode_files(c) for c in chunks[:12]]
    torch.cuda.synchronize()
    wins = []
    for k, images in enumerate(held):
        hs = np.array([x.shape[0] for x in images])
        ws = np.array([x.shape[1] for x in images])
        wins.append(sample_windows(proc, hs, ws, np.arange(BATCH, dtype=np.uint64) + k * BATCH))
    out = torch.empty((BATCH, 3, 224, 224), device="cuda")
    res: dict = {}

    def augment(k, dtype, dest=out, groups=None):
        return crop_resize_matmul(held[k], wins[k], (224, 224), proc=proc, out=dest,
                                  compute_dtype=dtype, groups=groups)

    for name, dtype, groups in (("float32", torch.float32, None), ("float16", torch.float16, None),
                                ("float16, 1 group", torch.float16, 1),
                                ("float16, 2 groups", torch.float16, 2)):
        row = res[f"augment {name}"] = _augment_times(
            lambda k, d=dtype, g=groups: augment(k, d, groups=g), len(held), seconds)
        print(f"augment {name}: host {row['host_ms']} ms, GPU {row['gpu_ms']} ms a batch, "
              f"{row['images_per_s']:,.0f} images/s", flush=True)
    if augment_only:
        return res
    worst, mean = 0.0, 0.0
    for k in range(len(held)):
        a = augment(k, torch.float32, torch.empty_like(out)).clone()
        b = augment(k, torch.float16, torch.empty_like(out))
        std = torch.tensor(proc.std, device="cuda")[:, None, None]
        levels = ((a - b).abs() * std * 255)
        worst, mean = max(worst, float(levels.max())), mean + float(levels.mean()) / len(held)
    res["float16 vs float32 (code values)"] = {"max": round(worst, 4), "mean": round(mean, 5)}
    print(f"float16 against float32: max {worst:.3f}, mean {mean:.4f} code values", flush=True)

    def beside(dtype):
        if dtype is None:
            return None
        dest = torch.empty_like(out)
        count = iter(range(1 << 62))
        return lambda: augment(next(count) % len(held), dtype, dest)

    blobs = [[Path(p).read_bytes() for p in c] for c in chunks[:12]]
    for label, fn, inputs, dtype in (
            ("decode_files", decoder.decode_files, chunks, None),
            ("decode bytes", decoder.decode, blobs, None),
            ("decode_files beside float32 augment", decoder.decode_files, chunks, torch.float32),
            ("decode_files beside float16 augment", decoder.decode_files, chunks, torch.float16)):
        res[label] = _decode_rate(fn, inputs, seconds, beside(dtype))
        print(f"{label}: {res[label]}", flush=True)
    return res


def _loader_plan(spec: str | None) -> list[tuple[str, Path, int]]:
    """``label:folder:K,K;...`` → ``(label, source folder, workers)`` per loader run; default:
    the code before this change (``.before/``, if present) and after it."""
    if spec:
        plan = []
        for part in spec.split(";"):
            label, folder, counts = part.split(":")
            plan += [(label, REPO / folder, int(k)) for k in counts.split(",")]
        return plan
    plan = [("after", REPO / "src", 2), ("after", REPO / "src", 4), ("after", REPO / "src", 0)]
    if (REPO / ".before").exists():
        plan = [("before", REPO / ".before", 2), ("before", REPO / ".before", 4)] + plan
    return plan + [("after", REPO / "src", 8)]


def main() -> int:
    """``[files] [seconds] [--loaders SPEC] [--no-stages] [--no-mps]``."""
    args = sys.argv[1:]
    if args and args[0] == "--loader":
        print(json.dumps(loader_row(int(args[1]), float(args[2]))), flush=True)
        return 0
    flags = {a for a in args if a in ("--no-stages", "--no-mps", "--augment-only")}
    spec = args[args.index("--loaders") + 1] if "--loaders" in args else None
    plain = [a for a in args if a not in flags and a != "--loaders" and a != spec]
    files = int(plain[0]) if plain else 8000
    seconds = float(plain[1]) if len(plain) > 1 else 6.0
    from vidloader.images._synthetic import write_image_folder

    write_image_folder(FOLDER, num_classes=10, per_class=files // 40, copies=4)
    results: dict = {"files": files, "seconds": seconds}
    if "--no-stages" not in flags:
        results["stages"] = _stages(seconds, augment_only="--augment-only" in flags)
    rows = results["loader"] = []
    for code, src, workers in _loader_plan(spec):
        row = {"code": code, **_child_loader(src, workers, seconds)}
        rows.append(row)
        print(f"loader {code} workers {workers}: {json.dumps(row)[:400]}", flush=True)
    mps = shutil.which("nvidia-cuda-mps-control") if "--no-mps" not in flags else None
    results["mps"] = mps
    if mps:
        env = {"CUDA_MPS_PIPE_DIRECTORY": "/tmp/mps-pipe", "CUDA_MPS_LOG_DIRECTORY": "/tmp/mps-log"}
        for d in env.values():
            os.makedirs(d, exist_ok=True)
        started = subprocess.run([mps, "-d"], env={**os.environ, **env}, capture_output=True,
                                 text=True)
        results["mps_start"] = started.returncode
        if started.returncode == 0:
            for workers in (4, 8):
                row = {"code": "after, MPS", **_child_loader(REPO / "src", workers, seconds, env)}
                rows.append(row)
                print(f"loader MPS workers {workers}: {json.dumps(row)[:400]}", flush=True)
            subprocess.run([mps], input="quit\n", env={**os.environ, **env}, text=True)
    out = Path(os.environ.get("OUT", ".")) / "jpeg_budget_probe.json"
    out.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
