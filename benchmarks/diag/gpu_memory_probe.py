"""Where the NVDEC loader's GPU memory goes, against what it planned (issue 16: 8.65 GiB by
nvidia-smi on the H100 where the target is 3 GiB at batch 128 × 224² on 1080p).

Runs ``VideoLoader(backend="nvdec")`` on the bench's W1 dataset (batch 128, 224², 16 demux
workers, 16 decoders; uniform random frames by default, ``--sampler sequential`` for the
session-9 figures) with PyTorch's allocation history on, and reports:

- the plan (``loader.memory_plan``): settings and bytes per component (staging buffers, GOP
  stacks, conversion workspace per decoder stream, cuBLAS workspaces, frame cache, resize
  weights, NVDEC surfaces) and its total;
- what happened: ``nvidia-smi`` (sampled every 0.2 s) above the CUDA context's own, PyTorch's
  reserved and allocated bytes at their peaks, the reserve per CUDA stream (the caching
  allocator keeps freed blocks per stream), the GPU staging buffers bound at most and the
  extra ones made, the decoded frames held in GOP stacks at most, the live allocations at the
  allocation peak by the vidloader line that made them and by component, and what is still
  allocated once the loader has shut down (cuBLAS's per-thread workspaces, the resize
  weights: kept for the process on purpose);
- throughput: frames/s over the batches after ``--warmup``.

Usage (on the device; the dataset is generated once under /tmp/bench-data):
``python3 benchmarks/diag/gpu_memory_probe.py [--batches 60] [--memory-budget 3GiB]
[--sampler random|sequential] [--tag NAME]``; writes ``$OUT/gpu_memory[-NAME].json``.
A bare number as the first argument is ``--batches`` (the session-9 form).
"""

from __future__ import annotations

import argparse
import collections
import gc
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import torch

from vidloader.pipeline._payloads import unread_segment_bytes

GIB = 1 << 30
MIB = 1 << 20

#: Allocation sites (file of the innermost vidloader frame) by plan component.
COMPONENT_OF = {
    "pipeline/_pool.py": "staging",
    "decoding/nvdec/_executor.py": "gop_stacks",
    "decoding/nvdec/_frame.py": "conversion",
    "processing/_nv12.py": "conversion",
    "processing/_resample.py": "conversion (and cuBLAS workspaces)",
    "pipeline/_assemble.py": "conversion",
    "processing/_geometry.py": "conversion",
    "decoding/nvdec/_gop_cache.py": "frame_cache",
    "pipeline/_transfer.py": "batch copy (the caller's)",
    "processing/_finalize.py": "batch copy (the caller's)",
}


def _site(frames: list[dict]) -> str:
    """The innermost vidloader frame of an allocation's stack (else the innermost frame)."""
    for frame in frames:
        name = frame.get("filename", "")
        if "vidloader" in name:
            return f"{name.split('vidloader/')[-1]}:{frame.get('line')} {frame.get('name')}"
    return frames[0].get("name", "?") if frames else "?"


def _active_blocks(snapshot: dict):
    for segment in snapshot["segments"]:
        for block in segment["blocks"]:
            if block["state"] == "active_allocated":
                yield block


def _by_site(snapshot: dict) -> list[tuple[str, float]]:
    sizes: dict[str, int] = collections.Counter()
    for block in _active_blocks(snapshot):
        sizes[_site(block.get("frames", []))] += block["size"]
    return [(site, size / GIB) for site, size in sorted(sizes.items(), key=lambda kv: -kv[1])]


def _by_component(by_site: list[tuple[str, float]]) -> dict[str, float]:
    out: dict[str, float] = collections.Counter()
    for site, gib in by_site:
        path = site.split(":")[0]
        out[COMPONENT_OF.get(path, f"other ({path})")] += gib
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def _reserved_by_stream(snapshot: dict) -> list[tuple[str, float, float]]:
    """``(stream, reserved GiB, allocated GiB)`` per CUDA stream, largest first."""
    reserved: dict[int, int] = collections.Counter()
    allocated: dict[int, int] = collections.Counter()
    for segment in snapshot["segments"]:
        reserved[segment.get("stream", 0)] += segment["total_size"]
        allocated[segment.get("stream", 0)] += segment.get("allocated_size", 0)
    rows = [(hex(s), r / GIB, allocated[s] / GIB) for s, r in reserved.items()]
    return sorted(rows, key=lambda r: -r[1])


def _smi_used_gib() -> float:
    out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits",
                          f"--id={torch.cuda.current_device()}"],
                         capture_output=True, text=True).stdout.split()
    return float(out[0]) / 1024 if out else float("nan")


class _Sampled:
    """:meth:`sample` called on a thread every ``every_s`` seconds inside a ``with`` block
    (first at its start)."""

    def __init__(self, every_s: float) -> None:
        self._every, self._stop = every_s, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self._every)

    def sample(self) -> None:
        raise NotImplementedError


class SmiPeak(_Sampled):
    """``nvidia-smi``'s memory.used sampled on a thread; the most seen."""

    def __init__(self, every_s: float = 0.2) -> None:
        super().__init__(every_s)
        self.peak = 0.0

    def sample(self) -> None:
        self.peak = max(self.peak, _smi_used_gib())


def _arguments(argv: list[str]) -> argparse.Namespace:
    if argv and argv[0].isdigit():  # the session-9 form: gpu_memory_probe.py 60
        argv = ["--batches", *argv]
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batches", type=int, default=60)
    p.add_argument("--warmup", type=int, default=10, help="batches before frames/s is timed")
    p.add_argument("--memory-budget", default=None, help="e.g. 3GiB (default: none)")
    p.add_argument("--sampler", choices=("random", "sequential", "relaxed"), default="random",
                   help="relaxed: GopShuffle(seed=0), the bench's relaxed workload")
    p.add_argument("--workers", type=int, default=16)
    p.add_argument("--decoders", type=int, default=16)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--scale", default="gpu-quick")
    p.add_argument("--no-history", action="store_true",
                   help="no allocation history (less host overhead: for frames/s)")
    p.add_argument("--tag", default="", help="suffix of the JSON's name")
    p.add_argument("--option", action="append", default=[], metavar="KEY=INT",
                   help="an nvdec_options entry, e.g. units_decoding=2 (repeatable)")
    return p.parse_args(argv)


def _options(pairs: list[str]) -> dict:
    """``nvdec_options`` from ``--option KEY=INT`` arguments."""
    out = {}
    for pair in pairs:
        key, _, value = pair.partition("=")
        out[key] = None if value.lower() == "none" else int(value)
    return out


class HostPeak(_Sampled):
    """Peak PSS of this process and, apart, of its children (the demux workers and the fork
    servers), sampled every 0.25 s on a thread (issue 16 item 1: where host memory goes);
    and the bytes of the demux segments in ``/dev/shm`` that no process maps (a worker's
    sent part not yet received: in no process's PSS; session 20's calls counted every file
    there above what was at the start, which on the device machine was the same)."""

    def __init__(self, every_s: float = 0.25) -> None:
        import psutil

        super().__init__(every_s)
        self._me = psutil.Process()
        self.main_gib = self.children_gib = self.shm_gib = self.total_gib = 0.0

    def sample(self) -> None:
        main = self._pss(self._me)
        children = sum(self._pss(c) for c in self._me.children(recursive=True))
        shm = unread_segment_bytes()
        self.main_gib = max(self.main_gib, main / GIB)
        self.children_gib = max(self.children_gib, children / GIB)
        self.shm_gib = max(self.shm_gib, shm / GIB)
        self.total_gib = max(self.total_gib, (main + children + shm) / GIB)

    @staticmethod
    def _pss(proc) -> int:
        try:
            return proc.memory_full_info().pss
        except Exception:  # noqa: BLE001 - psutil.Error: a child gone between the calls
            return 0


def _gib(n):
    return None if n is None else n / GIB


def _executor(loader):
    """The NVDEC executor behind the loader's pool, if it was created."""
    assembler = getattr(loader._pool, "assembler", None)
    executor = getattr(assembler, "executor", None)
    return getattr(executor, "_executor", executor)


def main(argv: list[str]) -> None:
    args = _arguments(argv)
    from vidloader import GopShuffle, RandomFrames, SequentialFrames, VideoLoader, build_index
    from vidloader.bench import prepare_dataset
    from vidloader.processing import Process

    dataset = prepare_dataset("W1", args.scale, data_dir="/tmp/bench-data")
    paths = sorted(str(p) for p in Path(dataset.root).rglob("*.mp4"))
    index = build_index(paths)
    torch.zeros(1, device="cuda")  # the CUDA context: not the loader's
    torch.cuda.synchronize()
    context = _smi_used_gib()
    if not args.no_history:
        torch.cuda.memory._record_memory_history(max_entries=200_000)
    sampler = {"random": lambda: RandomFrames(seed=0), "sequential": SequentialFrames,
               "relaxed": lambda: GopShuffle(seed=0)}[args.sampler]()
    loader = VideoLoader(index, sampler=sampler, batch_size=args.batch_size, backend="nvdec",
                         device="cuda", processing=Process(size=(224, 224)),
                         num_workers=args.workers, nvdec_decoders=args.decoders, drop_last=True,
                         memory_budget=args.memory_budget, nvdec_options=_options(args.option) or None)
    plan = loader.memory_plan
    print(f"plan: {json.dumps(plan)}", flush=True)
    peak_snapshot, peak, frames, t0 = None, 0, 0, None
    executor = demux = None
    with SmiPeak() as smi, HostPeak() as host:
        for n, batch in enumerate(loader, 1):
            if n == args.warmup:
                torch.cuda.synchronize()
                t0 = time.monotonic()
            elif n > args.warmup:
                frames += len(batch["frames"])
            del batch
            executor = executor or _executor(loader)
            demux = demux or getattr(loader._pool, "demux_ahead", None)  # gone after the loop
            allocated = torch.cuda.memory_allocated()
            if allocated > peak and not args.no_history:
                peak, peak_snapshot = allocated, torch.cuda.memory._snapshot()
            if n >= args.batches:
                break
        torch.cuda.synchronize()
        seconds = time.monotonic() - t0 if t0 is not None else float("nan")
    final = torch.cuda.memory._snapshot() if not args.no_history else None
    report = {
        "argv": argv, "sampler": args.sampler, "memory_budget": args.memory_budget,
        "batches": n, "frames_per_s": frames / seconds if frames else None,
        "staging_slots": loader.staging_slots, "gpu_staging_buffers": loader.gpu_staging_buffers,
        "lookahead": loader.lookahead, "plan": plan,
        "plan_total_gib": plan["total_bytes"] / GIB, "plan_torch_gib": plan["torch_bytes"] / GIB,
        "gpu_staging": dict(loader.stats["gpu_staging"]),
        "demux_ahead_limit_gib": _gib(getattr(demux, "limit", None)),
        "demux_ahead_peak_gib": _gib(getattr(demux, "peak_bytes", None)),
        "frames_held_peak": getattr(executor, "frames_held_peak", None),
        "stack_frames": getattr(executor, "stack_frames", None),
        "host_peak_pss_gib": {"main": host.main_gib, "children": host.children_gib,
                              "shm_unmapped": host.shm_gib, "total": host.total_gib},
        "smi_context_gib": context, "smi_peak_gib": smi.peak,
        "smi_loader_peak_gib": smi.peak - context,
        "smi_used_gib": _smi_used_gib(),
        "torch_reserved_gib": torch.cuda.memory_reserved() / GIB,
        "torch_allocated_gib": torch.cuda.memory_allocated() / GIB,
        "torch_peak_allocated_gib": torch.cuda.max_memory_allocated() / GIB,
        "torch_peak_reserved_gib": torch.cuda.max_memory_reserved() / GIB,
    }
    # NVDEC's surfaces and the binding's buffers: what nvidia-smi sees beyond PyTorch's reserve
    # and the context (against the plan's decoder_surfaces).
    report["outside_torch_peak_gib"] = smi.peak - context - report["torch_peak_reserved_gib"]
    if final is not None:
        report["reserved_by_stream_gib"] = _reserved_by_stream(final)[:24]
        report["live_by_site_gib"] = _by_site(final)[:25]
        report["peak_by_site_gib"] = _by_site(peak_snapshot)[:25] if peak_snapshot else []
        report["peak_by_component_gib"] = _by_component(report["peak_by_site_gib"])
    loader.shutdown()
    gc.collect()
    torch.cuda.synchronize()
    report["after_shutdown_allocated_gib"] = torch.cuda.memory_allocated() / GIB
    if not args.no_history:
        report["after_shutdown_by_site_gib"] = _by_site(torch.cuda.memory._snapshot())[:10]
    torch.cuda.empty_cache()
    report["after_empty_cache_reserved_gib"] = torch.cuda.memory_reserved() / GIB
    _print(report)
    out = Path(os.environ.get("OUT", "/tmp"))
    name = f"gpu_memory{'-' + args.tag if args.tag else ''}.json"
    (out / name).write_text(json.dumps(report, indent=1))


def _print(report: dict) -> None:
    for key, value in report.items():
        if key == "plan":
            print("plan components (GiB):", {k: round(v / GIB, 3)
                                             for k, v in value["components_bytes"].items()})
            print(f"plan settings: decoders {value['decoders']}, units_decoding "
                  f"{value['units_decoding']}, stack_frames {value['stack_frames']}, frame cache "
                  f"{value['frame_cache_bytes'] / MIB:.0f} MiB, GPU staging "
                  f"{value['gpu_staging_buffers']} of {value['staging_slots']} slots")
        elif isinstance(value, list) and value and isinstance(value[0], (list, tuple)):
            print(f"{key}:")
            for row in value[:15]:
                print("  " + "  ".join(f"{x:7.3f}" if isinstance(x, float) else str(x) for x in row[1:])
                      + f"  {row[0]}")
        elif isinstance(value, float):
            print(f"{key}: {value:.3f}")
        else:
            print(f"{key}: {value}")


if __name__ == "__main__":
    main(sys.argv[1:])
