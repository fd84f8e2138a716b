"""``vidloader info FILE``: a video's stream facts and keyframe spacing."""

from __future__ import annotations

import numpy as np

from ..index import describe_streams, probe_video


def register_info(sub) -> None:
    p = sub.add_parser("info", help="print a video's stream facts and keyframe spacing")
    p.add_argument("file", help="video file")
    p.add_argument("--stream", default="best",
                   help="which video stream: best (default, as ffmpeg picks), first, or an index")
    p.set_defaults(func=run_info)


def describe_record(rec, streams: list[str] | None = None) -> str:
    """The record's facts; ``streams``: every stream of the file, one line each, the indexed
    one marked."""
    gops = rec.gop_lengths
    lines = [
        f"file        {rec.path}",
        *_stream_lines(rec, streams),
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


def _stream_lines(rec, streams: list[str] | None) -> list[str]:
    if not streams:
        return [f"stream      #{rec.stream_index}"]
    lines = []
    for k, text in enumerate(streams):
        mark = "  <- indexed" if text.startswith(f"#{rec.stream_index} ") else ""
        lines.append(f"{'streams' if k == 0 else '':<12}{text}{mark}")
    return lines


def _streams_of(path: str) -> list[str]:
    import av

    with av.open(path) as container:
        return describe_streams(container)


def run_info(args) -> int:
    stream = int(args.stream) if args.stream.isdigit() else args.stream
    record = probe_video(args.file, stream=stream)
    print(describe_record(record, _streams_of(record.path)))
    return 0
