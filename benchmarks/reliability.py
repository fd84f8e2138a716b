"""Issue 17 figures on the CPU path: the decode-speed cost of FFmpeg error detection, and
what it catches among random 300-byte overwrites.

    python benchmarks/reliability.py speed --detect on|off [--repeat 3]
    python benchmarks/reliability.py damage --cases 100 --out benchmarks/results/reliability/damage.json
    python benchmarks/reliability.py moov --cases 300 > benchmarks/results/reliability/moov.log

``speed`` decodes every frame of 4 generated 480x270 H.264 videos (GOP 30, B-frames, 150
frames each) through the CPU executor and prints frames/s; compare the two settings with
``farm-bench --vs``. ``damage`` overwrites 300 random bytes at a random place in the middle
half of a 320x240 H.264 file (90 frames, GOP 30, B-frames), indexes it, decodes every frame
with detection off and on, and counts the frames that differ from the intact file's.
``moov`` overwrites 200 random bytes at a random place inside the ``moov`` box of the same
file and tallies what ``build_index`` makes of it: rejected (by the frame-count cross-check
or otherwise), indexed with a warning, indexed whole, or indexed short without a word.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

CACHE = Path(tempfile.gettempdir()) / "vidloader-reliability-bench"


def _videos() -> list[Path]:
    from vidloader.synthetic import VideoSpec, make_video

    CACHE.mkdir(exist_ok=True)
    out = []
    for i in range(4):
        path = CACHE / f"speed_{i}.mp4"
        if not path.exists():
            make_video(path, VideoSpec(width=480, height=270, num_frames=150, gop=30, bframes=2, seed=i))
        out.append(path)
    return out


def speed(detect: bool, repeat: int) -> None:
    from vidloader import build_index
    from vidloader.decoding import DecodeTask, get_executor

    index = build_index([str(p) for p in _videos()], num_workers=0, progress=False)
    tasks = [DecodeTask.for_frames(k, r, range(r.num_frames)) for k, r in enumerate(index)]
    frames, t0 = 0, time.perf_counter()
    for _ in range(repeat):
        with get_executor("cpu", detect_errors=detect) as ex:
            for task in tasks:
                ex.decode(task, lambda i, f: f.to_rgb((224, 224)))
                frames += len(task.frames)
    print(f"detect={detect} frames={frames} fps={frames / (time.perf_counter() - t0):.1f}")


def _decode_all(path: str, record, detect: bool) -> tuple[dict[int, np.ndarray], str]:
    from vidloader.decoding import DecodeTask, get_executor
    from vidloader.errors import VidloaderError

    got: dict[int, np.ndarray] = {}
    try:
        with get_executor("cpu", detect_errors=detect) as ex:
            ex.decode(DecodeTask.for_frames(0, record, range(record.num_frames)),
                      lambda i, f: got.__setitem__(i, f.to_rgb()))
    except VidloaderError as exc:
        return got, type(exc).__name__
    return got, ""


def damage(cases: int, out: str) -> None:
    from vidloader import build_index
    from vidloader.synthetic import VideoSpec, make_video

    CACHE.mkdir(exist_ok=True)
    good = CACHE / "damage_src.mp4"
    if not good.exists():
        make_video(good, VideoSpec(width=320, height=240, num_frames=90, gop=30, bframes=2, seed=1))
    ref_record = build_index(str(good), num_workers=0, progress=False)[0]
    ref, _ = _decode_all(str(good), ref_record, False)
    data = good.read_bytes()
    rng = np.random.default_rng(17)
    rows = []
    for case in range(cases):
        blob = bytearray(data)
        at = int(rng.integers(len(blob) // 4, 3 * len(blob) // 4))
        blob[at:at + 300] = rng.integers(0, 256, 300, np.uint8).tobytes()
        bad = CACHE / "damage_case.mp4"
        bad.write_bytes(bytes(blob))
        index = build_index(str(bad), num_workers=0, progress=False)
        row = {"case": case, "offset": at, "indexed": len(index) == 1}
        if len(index) == 1:
            for detect in (False, True):
                got, err = _decode_all(str(bad), index[0], detect)
                wrong = sum(1 for i, a in got.items() if i < len(ref) and not np.array_equal(a, ref[i]))
                row[f"detect_{detect}"] = {"delivered": len(got), "wrong": wrong, "error": err}
        rows.append(row)
    summary = _summary(rows)
    result = {"machine": platform.processor() or platform.machine(), "python": sys.version.split()[0],
              "cases": cases, "summary": summary, "rows": rows}
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(json.dumps(result, indent=1))
    print(json.dumps(summary, indent=1))


def moov(cases: int) -> None:
    import logging

    from vidloader import build_index
    from vidloader.synthetic import VideoSpec, make_video

    logging.disable(logging.WARNING)  # one build_index warning per case otherwise
    CACHE.mkdir(exist_ok=True)
    good = CACHE / "damage_src.mp4"
    if not good.exists():
        make_video(good, VideoSpec(width=320, height=240, num_frames=90, gop=30, bframes=2, seed=1))
    data = good.read_bytes()
    start = data.index(b"moov") - 4
    size = int.from_bytes(data[start:start + 4], "big")
    rng = np.random.default_rng(17)
    tally: dict[str, int] = {}
    for _ in range(cases):
        blob = bytearray(data)
        at = int(rng.integers(start + 8, start + size - 200))
        blob[at:at + 200] = rng.integers(0, 256, 200, np.uint8).tobytes()
        bad = CACHE / "moov_case.mp4"
        bad.write_bytes(bytes(blob))
        index = build_index(str(bad), num_workers=0, progress=False)
        if index.rejected:
            key = "rejected: frame count" if "sample table states" in index.rejected[0].reason else "rejected: other"
        elif getattr(index[0], "warning", ""):
            key = "indexed with a warning"
        else:
            key = "indexed whole" if index[0].num_frames == 90 else "indexed short, no warning"
        tally[key] = tally.get(key, 0) + 1
    print(json.dumps({"machine": platform.processor() or platform.machine(), "cases": cases,
                      "moov_bytes": size, "outcomes": tally}, indent=1))


def _summary(rows: list[dict]) -> dict:
    indexed = [r for r in rows if r["indexed"]]
    out = {"cases": len(rows), "rejected_at_index": len(rows) - len(indexed)}
    for detect in (False, True):
        key = f"detect_{detect}"
        damaged = [r for r in indexed if r[key]["wrong"] or r[key]["error"] or r["detect_False"]["wrong"]]
        out[key] = {
            "files_with_wrong_frames_delivered": sum(1 for r in indexed if r[key]["wrong"]),
            "wrong_frames_delivered": sum(r[key]["wrong"] for r in indexed),
            "files_raising_a_typed_error": sum(1 for r in indexed if r[key]["error"]),
            "files_damaged_visibly_or_failing": len(damaged),
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("speed")
    s.add_argument("--detect", choices=["on", "off"], required=True)
    s.add_argument("--repeat", type=int, default=3)
    d = sub.add_parser("damage")
    d.add_argument("--cases", type=int, default=100)
    d.add_argument("--out", default=os.path.join("benchmarks", "results", "reliability", "damage.json"))
    m = sub.add_parser("moov")
    m.add_argument("--cases", type=int, default=300)
    args = parser.parse_args()
    if args.cmd == "speed":
        speed(args.detect == "on", args.repeat)
    elif args.cmd == "moov":
        moov(args.cases)
    else:
        damage(args.cases, args.out)


if __name__ == "__main__":
    main()
