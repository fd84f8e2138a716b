"""Does NVDEC say when it conceals bitstream damage? (issue 17, item 7)

On the H200, 300 bytes overwritten mid-stream came out of the NVDEC path as 30 of 90 wrong
frames without an error. PyNvVideoCodec 2.2.4 exposes no decode status, but its decoder calls
``cuvidGetDecodeStatus`` and prints ``Decode Error occurred for picture %d`` on the process's
standard output (the string is in its extension module). This probe decodes an intact and a
damaged copy of one video on NVDEC with file descriptor 1 captured, and reports the messages
and which frames differ from the CPU decode of the intact file, so the next step can be
chosen on evidence: capture and attribute those messages, or look elsewhere.

Since the NVDEC status tap (``decoding/nvdec/_status_tap.py``) acts on those messages, the
damaged copy is decoded twice: with the tap off (``VIDLOADER_NVDEC_STATUS_TAP=0``: the
message printed, the wrong frames delivered, as before) and with it on (a
``CorruptVideoError`` naming the GOP, nothing printed, no frame delivered).

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
from tests.media import damage_slice_data, reference_frames  # noqa: E402
from vidloader.synthetic import VideoSpec, make_video  # noqa: E402


def _captured(fn):
    """``fn()`` with file descriptor 1 redirected to a file: its result (or the exception it
    raised) and what was printed."""
    sys.stdout.flush()
    saved = os.dup(1)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 1)
        try:
            result = fn()
        except Exception as exc:  # noqa: BLE001 - a typed error is an outcome to record
            result = exc
        finally:
            sys.stdout.flush()
            os.dup2(saved, 1)
            os.close(saved)
        tmp.seek(0)
        return result, tmp.read().decode(errors="replace")


def _decode(path: Path, frames: int):
    record = vidloader.build_index(path, num_workers=0, progress=False)[0]
    out = vidloader.decode_frames(path, range(frames), index_record=record, backend="nvdec")
    return out.cpu().numpy()


def main() -> None:
    root = Path(tempfile.mkdtemp())
    good, bad = root / "good.mp4", root / "bad.mp4"
    frames = 30
    make_video(good, VideoSpec(width=256, height=256, num_frames=frames, gop=10, bframes=0, seed=0))
    damaged_at = damage_slice_data(good, bad, 12)
    reference = reference_frames(str(good)).astype(int)
    report = {"damaged_picture": damaged_at}
    cases = (("intact", good, "1"), ("damaged_tap_off", bad, "0"), ("damaged", bad, "1"))
    for name, path, tap in cases:
        os.environ["VIDLOADER_NVDEC_STATUS_TAP"] = tap  # read when the executor starts decoding
        rgb, printed = _captured(lambda path=path: _decode(path, frames))
        entry = report[name] = {"status_tap": tap == "1", "printed": printed.strip().splitlines()[:40]}
        if isinstance(rgb, Exception):
            entry["error"] = repr(rgb)
            continue
        diff = np.abs(rgb.astype(int) - reference).reshape(frames, -1).mean(1)
        entry.update({"frames_off_by_more_than_3": [int(i) for i in np.flatnonzero(diff > 3)],
                      "mean_diff_per_frame": [round(float(d), 2) for d in diff]})
    print(json.dumps(report, indent=1))
    if len(sys.argv) > 1:
        Path(sys.argv[1]).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
