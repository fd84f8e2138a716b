"""Does NVDEC say when it conceals bitstream damage? (issue 17, item 7)

On the H200, 300 bytes overwritten mid-stream came out of the NVDEC path as 30 of 90 wrong
frames without an error. PyNvVideoCodec 2.2.4 exposes no decode status, but its decoder calls
``cuvidGetDecodeStatus`` and prints ``Decode Error occurred for picture %d`` on the process's
standard output (the string is in its extension module). This probe decodes an intact and a
damaged copy of one video on NVDEC with file descriptor 1 captured, and reports the messages
and which frames differ from the CPU decode of the intact file, so the next step can be
chosen on evidence: capture and attribute those messages, or look elsewhere.

    PYTHONPATH=$PWD/src:$PWD/.site python3 benchmarks/diag/nvdec_damage_probe.py OUT.json
"""

import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository, for tests/

import vidloader  # noqa: E402
from tests.media import reference_frames  # noqa: E402
from vidloader.synthetic import VideoSpec, make_video  # noqa: E402


def _captured(fn):
    """``fn()`` with file descriptor 1 redirected to a file; its result and what was printed."""
    sys.stdout.flush()
    saved = os.dup(1)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 1)
        try:
            result = fn()
        finally:
            sys.stdout.flush()
            os.dup2(saved, 1)
            os.close(saved)
        tmp.seek(0)
        return result, tmp.read().decode(errors="replace")


def _damage_slice_data(src: Path, dst: Path, which: int) -> int:
    """Copy ``src`` to ``dst`` with the interior of the largest NAL unit (the slice) of its
    ``which``-th non-key picture overwritten with random bytes, every length prefix kept (the
    test suite's helper overwrites from byte 8 of the packet on, which can break a later NAL's
    length prefix: then the Annex B filter refuses the packet, the damage is caught at demux,
    and concealment is never reached). Returns the picture's display index."""
    import av

    with av.open(str(src)) as c:
        packets = [(p.pos, p.size, p.pts, bytes(p)) for p in c.demux(c.streams.video[0])
                   if p.size and not p.is_keyframe]
    pos, _, pts, raw = packets[which]
    nals, off = [], 0
    while off + 4 <= len(raw):  # 4-byte AVCC length prefixes
        n = int.from_bytes(raw[off:off + 4], "big")
        nals.append((off + 4, n))
        off += 4 + n
    start, size = max(nals, key=lambda x: x[1])
    data = bytearray(src.read_bytes())
    lo, hi = pos + start + 4, pos + start + size  # keep the NAL header and the first slice bytes
    data[lo:hi] = np.random.default_rng(0).integers(0, 256, hi - lo, np.uint8).tobytes()
    dst.write_bytes(bytes(data))
    with av.open(str(src)) as c:
        all_pts = sorted(p.pts for p in c.demux(c.streams.video[0]) if p.size)
    return all_pts.index(pts)


def _decode(path: Path, frames: int):
    record = vidloader.build_index(path, num_workers=0, progress=False)[0]
    out = vidloader.decode_frames(path, range(frames), index_record=record, backend="nvdec")
    return out.cpu().numpy()


def main() -> None:
    root = Path(tempfile.mkdtemp())
    good, bad = root / "good.mp4", root / "bad.mp4"
    frames = 30
    make_video(good, VideoSpec(width=256, height=256, num_frames=frames, gop=10, bframes=0, seed=0))
    damaged_at = _damage_slice_data(good, bad, 12)
    reference = reference_frames(str(good)).astype(int)
    report = {"damaged_picture": damaged_at}
    for name, path in (("intact", good), ("damaged", bad)):
        try:
            rgb, printed = _captured(lambda path=path: _decode(path, frames))
        except Exception as exc:  # noqa: BLE001 - a typed error is an outcome to record
            report[name] = {"error": repr(exc)}
            continue
        diff = np.abs(rgb.astype(int) - reference).reshape(frames, -1).mean(1)
        report[name] = {"printed": printed.strip().splitlines()[:40],
                        "frames_off_by_more_than_3": [int(i) for i in np.flatnonzero(diff > 3)],
                        "mean_diff_per_frame": [round(float(d), 2) for d in diff]}
    print(json.dumps(report, indent=1))
    if len(sys.argv) > 1:
        Path(sys.argv[1]).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
