"""Demux workers give their freed heap back between units (``_utils._heap.trim_heap``):
glibc keeps freed blocks between live ones, so a worker stayed at its largest unit's size."""

from __future__ import annotations

import subprocess
import sys

import pytest

_PROBE = r"""
import sys
from vidloader._utils._heap import trim_heap

def rss_mib():
    return int(open("/proc/self/statm").read().split()[1]) * 4096 / 2**20

start = rss_mib()
# 150 MiB of 2 KiB blocks (malloc's heap, not pymalloc's arenas nor mmap), one in 64 kept
# alive, as a unit's packets are freed around the worker's longer-lived objects.
blocks = [bytes(2048) for _ in range(75_000)]
kept = blocks[::64]
del blocks
freed = rss_mib()
trimmed = trim_heap()
print(start, freed, rss_mib(), trimmed)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc and /proc/self/statm")
def test_trim_heap_returns_the_free_pages_between_live_blocks():
    out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, check=True)
    start, freed, after, trimmed = out.stdout.split()
    start, freed, after = float(start), float(freed), float(after)
    if trimmed != "True":
        pytest.skip("this C library has no malloc_trim")
    assert freed - start > 100  # glibc kept the freed blocks: the worker's old behaviour
    assert after - start < 0.3 * (freed - start)


def test_a_demux_worker_trims_its_heap_after_each_unit_is_sent(tmp_path, monkeypatch):
    """After each unit (demuxed or failed), once its message is queued: the GPU process is
    not kept waiting for the trim."""
    import queue

    from vidloader import RandomFrames, build_index
    from vidloader.pipeline import _demux
    from vidloader.pipeline._messages import (
        STOP,
        DemuxTask,
        DemuxWorkerStart,
        Failure,
        PacketsDemuxed,
        Ready,
    )
    from vidloader.pipeline._payloads import unpack_payloads
    from vidloader.synthetic import VideoSpec, make_dataset

    paths = make_dataset(tmp_path, [VideoSpec(width=64, height=48, num_frames=20, gop=5)], num_workers=1)
    index = build_index(paths, num_workers=0, progress=False)
    plan = RandomFrames(seed=0).plan_epoch(index, epoch=0, batch_size=4)
    events = []

    class Results(queue.Queue):
        def put(self, item, *args, **kwargs):
            events.append(type(item).__name__)
            super().put(item, *args, **kwargs)

    monkeypatch.setattr(_demux, "trim_heap", lambda: events.append("trim"))
    # The worker ignores SIGINT (Ctrl-C is the loader's); here it runs in pytest's process,
    # whose later subprocesses would inherit the ignored signal (test_ctrl_c_leaves_no_worker).
    monkeypatch.setattr(_demux.signal, "signal", lambda *args: None)
    tasks, results = queue.Queue(), Results()
    tasks.put(DemuxTask(0, [plan.batch(0)], 0, 0, 1))
    tasks.put(DemuxTask(1, [plan.batch(1)], 0, 0, 99))
    tasks.put(DemuxTask(2, ["not a plan"], 0, 0, 1))  # fails: a Failure, then the trim
    tasks.put(STOP)
    _demux.demux_worker_main(DemuxWorkerStart(0, index, False, None), tasks, results)
    assert events == ["Ready", "PacketsDemuxed", "trim", "PacketsDemuxed", "trim", "Failure", "trim"]
    sent = [results.get() for _ in range(4)]
    assert isinstance(sent[0], Ready) and isinstance(sent[3], Failure) and sent[3].unit_key == 2
    for msg in sent[1:3]:  # the segments reached the queue whole: map (and unlink) them
        assert isinstance(msg, PacketsDemuxed)
        assert all(b is None or b.payload.nbytes for b in unpack_payloads(msg.light, msg.segment))
