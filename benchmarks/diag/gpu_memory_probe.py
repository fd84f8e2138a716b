"""Where the NVDEC loader's GPU memory goes (issue 16: 7.8-10.6 GiB where the target is
3 GiB at batch 128 × 224² on 1080p).

Runs ``VideoLoader(backend="nvdec")`` on the bench's W1 dataset (sequential, batch 128,
224², 16 workers) with PyTorch's allocation history on, and after ``batches`` batches reports:
- the device as ``nvidia-smi`` sees it (CUDA context, NVDEC surfaces, cuBLAS workspaces and
  PyTorch's reserve together) against PyTorch's reserved, allocated and peak bytes;
- the live allocations at the end and at the peak, summed by the innermost vidloader
  frame of the stack that allocated them (file:line function).

Usage (on the device, after ``prepare_dataset('W1', 'gpu-quick', data_dir='/tmp/bench-data')``):
``python3 benchmarks/diag/gpu_memory_probe.py [batches]``; writes ``$OUT/gpu_memory.json``.
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
from pathlib import Path

import torch

GIB = 1 << 30


def _site(frames: list[dict]) -> str:
    """The innermost vidloader frame of an allocation's stack (else the innermost frame)."""
    for frame in frames:
        name = frame.get("filename", "")
        if "vidloader" in name:
            return f"{name.split('vidloader/')[-1]}:{frame.get('line')} {frame.get('name')}"
    return frames[0].get("name", "?") if frames else "?"


def _by_site(snapshot: dict) -> list[tuple[str, float]]:
    sizes: dict[str, int] = collections.Counter()
    for segment in snapshot["segments"]:
        for block in segment["blocks"]:
            if block["state"] == "active_allocated":
                sizes[_site(block.get("frames", []))] += block["size"]
    return [(site, size / GIB) for site, size in sorted(sizes.items(), key=lambda kv: -kv[1])]


def _smi_used_gib() -> float:
    out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True).stdout.split()
    return float(out[0]) / 1024 if out else float("nan")


def main() -> None:
    batches = int(sys.argv[1]) if len(sys.argv) > 1 else 60
    from vidloader import SequentialFrames, VideoLoader, build_index
    from vidloader.bench import prepare_dataset
    from vidloader.processing import Process

    dataset = prepare_dataset("W1", "gpu-quick", data_dir="/tmp/bench-data")
    paths = sorted(str(p) for p in Path(dataset.root).rglob("*.mp4"))
    index = build_index(paths)
    torch.cuda.init()
    base = _smi_used_gib()
    torch.cuda.memory._record_memory_history(max_entries=100_000)
    loader = VideoLoader(index, sampler=SequentialFrames(), batch_size=128, backend="nvdec",
                         device="cuda", processing=Process(size=(224, 224)), num_workers=16,
                         drop_last=True)
    peak_snapshot, peak = None, 0
    for n, batch in enumerate(loader, 1):
        del batch
        allocated = torch.cuda.memory_allocated()
        if allocated > peak:
            peak, peak_snapshot = allocated, torch.cuda.memory._snapshot()
        if n >= batches:
            break
    torch.cuda.synchronize()
    report = {
        "batches": n, "staging_slots": loader.staging_slots, "lookahead": loader.lookahead,
        "smi_used_before_gib": base, "smi_used_gib": _smi_used_gib(),
        "torch_reserved_gib": torch.cuda.memory_reserved() / GIB,
        "torch_allocated_gib": torch.cuda.memory_allocated() / GIB,
        "torch_peak_allocated_gib": torch.cuda.max_memory_allocated() / GIB,
        "torch_peak_reserved_gib": torch.cuda.max_memory_reserved() / GIB,
        "live_by_site_gib": _by_site(torch.cuda.memory._snapshot())[:25],
        "peak_by_site_gib": _by_site(peak_snapshot)[:25] if peak_snapshot else [],
    }
    loader.shutdown()
    for key, value in report.items():
        if isinstance(value, list):
            print(f"{key}:")
            for site, gib in value[:15]:
                print(f"  {gib:7.3f} GiB  {site}")
        else:
            print(f"{key}: {value}")
    out = Path(os.environ.get("OUT", "/tmp"))
    (out / "gpu_memory.json").write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
