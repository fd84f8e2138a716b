"""``vidloader prepare SRC DST --gop N``: re-encode a dataset for fast random access."""

from __future__ import annotations


def register_prepare(sub) -> None:
    p = sub.add_parser(
        "prepare", help="re-encode videos for fast random access (short closed GOPs)",
        description="Re-encode every video under SRC into DST (same relative paths, .mp4): a "
        "keyframe every --gop frames, closed GOPs, yuv420p, video stream only. Resumable: "
        "rerun the same command after an interruption. Writes DST/prepare-report.json, merged "
        "with the report of earlier runs.")
    p.add_argument("source", help="folder of videos (recursive) or one file")
    p.add_argument("destination", help="output folder (not inside SRC)")
    p.add_argument("--gop", type=int, default=30, help="keyframe interval in frames (default 30)")
    p.add_argument("--bframes", action="store_true", help="allow B-frames (default: none)")
    p.add_argument("--max-size", type=int, default=None,
                   help="scale down so the longer side is at most this many pixels")
    p.add_argument("--codec", choices=["h264", "hevc"], default="h264")
    p.add_argument("--crf", type=int, default=20, help="encoder quality (lower: better, larger)")
    p.add_argument("--preset", default="veryfast", help="x264/x265 speed preset")
    p.add_argument("-j", "--workers", type=int, default=None, help="encoding processes (default: cores)")
    p.set_defaults(func=run_prepare)


def run_prepare(args) -> int:
    from ..prepare import prepare_dataset, write_report

    report = prepare_dataset(
        args.source, args.destination, gop=args.gop, bframes=args.bframes,
        max_size=args.max_size, codec=args.codec, crf=args.crf, preset=args.preset,
        num_workers=args.workers,
    )
    path, merged = write_report(report)
    print(report.summary())
    earlier = len(merged["runs"]) - 1
    print(f"report written to {path}" + (f" (merged with {earlier} earlier run(s))" if earlier else ""))
    return 1 if report.count("failed") else 0
