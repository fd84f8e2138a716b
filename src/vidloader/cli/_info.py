"""``vidloader info FILE``: a video's stream facts and keyframe spacing."""

from __future__ import annotations

import numpy as np

from ..index import probe_video


def register_info(sub) -> None:
    p = sub.add_parser("info", help="print a video's stream facts and keyframe spacing")
    p.add_argument("file", help="video file")
    p.set_defaults(func=run_info)


def describe_record(rec) -> str:
    gops = rec.gop_lengths
    lines = [
        f"file        {rec.path}",
        f"codec       {rec.codec} ({rec.pix_fmt}, {rec.bit_depth}-bit)",
        f"size        {rec.width}x{rec.height}" + (f", rotation {rec.rotation}°" if rec.rotation else ""),
        f"frames      {rec.num_frames} ({rec.duration_seconds:.2f} s at {rec.fps:.3f} fps)",
        f"time base   {rec.time_base}",
        f"color       {rec.color_space}, range {rec.color_range}",
        f"keyframes   {len(rec.keyframes)}; GOP length min {gops.min()}, "
        f"mean {gops.mean():.1f}, max {gops.max()} frames",
        f"random access: on average {np.mean([(g + 1) / 2 for g in gops]):.1f} frames decoded "
        "per isolated random frame (from the keyframe to the frame)",
    ]
    if rec.warning:
        lines.append(f"warning     {rec.warning}")
    return "\n".join(lines)


def run_info(args) -> int:
    print(describe_record(probe_video(args.file)))
    return 0
