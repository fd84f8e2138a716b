"""``vidloader index DIR``: build and save an index, then summarise it."""

from __future__ import annotations

import collections
from pathlib import Path

from ..index import VideoIndex, build_index

#: GPU generations with an NVDEC table (see ``decoding/nvdec/_caps.py``), without importing it.
GENERATIONS = ("turing", "ampere", "blackwell")


def register_index(sub) -> None:
    p = sub.add_parser("index", help="index the videos under a directory and save the index")
    p.add_argument("paths", nargs="+", help="video files or directories")
    p.add_argument("-o", "--output", default=None,
                   help="index file to write (default: DIR/vidloader-index.npz)")
    p.add_argument("-j", "--workers", type=int, default=None, help="probe processes (default: cores)")
    p.add_argument("--gpu", default="auto", choices=["auto", "none", *GENERATIONS],
                   help="whose NVDEC the backend split is for: 'auto' asks this machine's driver "
                        "(the Turing/A100/Hopper table without a GPU), a GPU generation's table, "
                        "or 'none' for no split")
    p.set_defaults(func=run_index)


def summarize(index: VideoIndex) -> str:
    codecs = collections.Counter(r.codec for r in index)
    sizes = collections.Counter(f"{r.width}x{r.height}" for r in index)
    seconds = sum(r.duration_seconds for r in index)
    lines = [
        f"{len(index)} videos, {index.total_frames} frames, {seconds / 3600:.2f} h",
        "codecs: " + ", ".join(f"{c} ×{n}" for c, n in codecs.most_common()),
        "sizes:  " + ", ".join(f"{s} ×{n}" for s, n in sizes.most_common(5)),
    ]
    if index.rejected:
        lines.append(f"{len(index.rejected)} rejected:")
        lines += [f"  {r.path}: {r.reason}" for r in index.rejected[:20]]
    flagged = index.flagged
    if flagged:
        lines.append(f"{len(flagged)} indexed with a warning:")
        lines += [f"  {r.path}: {r.warning}" for r in flagged[:20]]
    return "\n".join(lines)


def nvdec_caps_for(gpu: str):
    """The NVDEC caps the split is computed for: this machine's driver (``"auto"`` with a CUDA
    GPU and PyNvVideoCodec), else a generation's table."""
    from ..decoding.nvdec._caps import query_nvdec_caps, table_nvdec_caps

    if gpu == "auto":
        try:
            import torch

            if torch.cuda.is_available():
                return query_nvdec_caps(gpu=0)
        except Exception:  # no driver, no PyNvVideoCodec: the table stands in, and says so
            pass
        return table_nvdec_caps("turing", gpu="no GPU here; Turing/A100/Hopper table")
    return table_nvdec_caps(gpu)


def backend_split(index: VideoIndex, caps) -> str:
    """How many files NVDEC takes with ``backend="nvdec"``/``"combo"`` and why the rest go to
    the CPU (each distinct reason once, with its count)."""
    from ..decoding.nvdec._caps import nvdec_decodability

    mask, reasons = nvdec_decodability(list(index), caps)
    lines = [f"backend split for NVDEC on {caps.gpu} ({caps.source}): "
             f"NVDEC {int(mask.sum())} files, CPU {int((~mask).sum())}"]
    for why, n in collections.Counter(r for r in reasons if r).most_common(10):
        lines.append(f"  CPU ×{n}: {why}")
    return "\n".join(lines)


def run_index(args) -> int:
    index = build_index(args.paths, num_workers=args.workers, progress=True)
    first = Path(args.paths[0])
    out = Path(args.output) if args.output else (first if first.is_dir() else first.parent) / "vidloader-index.npz"
    index.save(out)
    print(summarize(index))
    if args.gpu != "none" and len(index):
        print(backend_split(index, nvdec_caps_for(args.gpu)))
    print(f"index written to {out}")
    return 0
