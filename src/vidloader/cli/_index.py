"""``vidloader index DIR``: build and save an index, then summarise it."""

from __future__ import annotations

import collections
from pathlib import Path

from ..index import VideoIndex, build_index


def register_index(sub) -> None:
    p = sub.add_parser("index", help="index the videos under a directory and save the index")
    p.add_argument("paths", nargs="+", help="video files or directories")
    p.add_argument("-o", "--output", default=None,
                   help="index file to write (default: DIR/vidloader-index.npz)")
    p.add_argument("-j", "--workers", type=int, default=None, help="probe processes (default: cores)")
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


def run_index(args) -> int:
    index = build_index(args.paths, num_workers=args.workers, progress=True)
    first = Path(args.paths[0])
    out = Path(args.output) if args.output else (first if first.is_dir() else first.parent) / "vidloader-index.npz"
    index.save(out)
    print(summarize(index))
    print(f"index written to {out}")
    return 0
