"""What the NVDEC status tap costs per GOP, on the CPU (no GPU needed).

Two figures:

* ``tap_us_per_gop``: the tap alone, ``mark`` + ``verify`` with nothing printed (the gate,
  ``fstat`` of fd 1, ``fflush``, a sentinel through the pipe and back), from one thread and
  from several at once;
* ``executor``: ``NvdecExecutor`` on the stand-in PyNvVideoCodec (``tests/_fake_nvc.py``,
  which decodes with FFmpeg on the CPU), tap on and off (``VIDLOADER_NVDEC_STATUS_TAP``),
  interleaved rounds, median time per GOP of each, and their difference. The stand-in's
  decode takes milliseconds per GOP, so the difference is within its noise; the first figure
  is the one to quote.

    PYTHONPATH=$PWD/src python benchmarks/diag/status_tap_cost.py [OUT.json]
"""

import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository, for tests/

import pytest  # noqa: E402

from tests import _fake_nvc  # noqa: E402
from vidloader.decoding.nvdec import _status_tap  # noqa: E402
from vidloader.decoding.nvdec._executor import NvdecExecutor  # noqa: E402
from vidloader.index import probe_video  # noqa: E402
from vidloader.planning import plan_tasks_for_frames  # noqa: E402
from vidloader.synthetic import VideoSpec, make_video  # noqa: E402


def tap_alone(threads: int, n: int = 3000) -> float:
    """µs each thread spends per GOP on mark + verify (nothing printed), ``threads`` threads
    at once (they share the reader thread and the gate)."""
    tap = _status_tap.acquire()
    try:
        def run() -> None:
            for _ in range(n):
                tap.verify(tap.mark())

        run()  # warm
        workers = [threading.Thread(target=run) for _ in range(threads)]
        t0 = time.perf_counter()
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        return (time.perf_counter() - t0) / n * 1e6  # what each thread spends per GOP
    finally:
        _status_tap.release(tap)


def executor_round(record, tap_on: bool, num_decoders: int) -> float:
    """Seconds per GOP to decode every frame of ``record`` through ``submit_batch``."""
    os.environ[_status_tap.ENV_VAR] = "1" if tap_on else "0"
    ex = NvdecExecutor(num_decoders=num_decoders, frame_cache_bytes=0, packet_cache_bytes=0)
    try:
        tasks = [plan_tasks_for_frames(k, record, range(record.num_frames)) for k in range(4)]
        gops = sum(len(t.gops) for t in tasks)
        t0 = time.perf_counter()
        ex.submit_batch(tasks, lambda pos, idx, frames: None).wait()
        return (time.perf_counter() - t0) / gops
    finally:
        ex.close()


def main() -> None:
    mp = pytest.MonkeyPatch()
    _fake_nvc.install(mp, _fake_nvc.FakeNvc())
    path = Path(tempfile.mkdtemp()) / "v.mp4"
    make_video(path, VideoSpec(width=96, height=64, num_frames=120, gop=10, bframes=0, seed=0))
    record = probe_video(path)
    report = {"tap_us_per_gop": {f"{t}_threads": round(tap_alone(t), 1) for t in (1, 4)},
              "executor": {}}
    for decoders in (1, 4):
        times = {True: [], False: []}
        for _ in range(7):
            for on in (True, False):
                times[on].append(executor_round(record, on, decoders))
        on, off = (statistics.median(times[k]) * 1e6 for k in (True, False))
        report["executor"][f"{decoders}_decoders"] = {
            "us_per_gop_tap_on": round(on, 1), "us_per_gop_tap_off": round(off, 1),
            "difference_us": round(on - off, 1)}
    text = json.dumps(report, indent=1)
    sys.stderr.write(text + "\n")
    if len(sys.argv) > 1:
        Path(sys.argv[1]).write_text(text)


if __name__ == "__main__":
    main()
