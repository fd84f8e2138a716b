"""Demux workers write packets straight into their part's shared-memory segment
(``pipeline._payloads.SharedPayloads``, ``demux_gops(..., sink=)``): one copy from FFmpeg's
buffers instead of bytes, a bundle's array and the segment (issue 16 item 1: a worker held
2.2 times its part's bytes at its peak)."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import numpy as np
import pytest

from vidloader.decoding._base import GopRequest

from ._nvdec_media import record_of

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="POSIX shared memory in /dev/shm, /proc")

_FIELDS = ("offsets", "sizes", "pts", "is_key", "is_nonref", "gop_id", "gop_keyframes",
           "gop_last")


def _all_frames(record) -> list[GopRequest]:
    ends = list(record.keyframes[1:]) + [record.num_frames]
    return [GopRequest(int(k), np.arange(int(k), int(e))) for k, e in zip(record.keyframes, ends)]


def _same_bundle(a, b) -> None:
    assert (a.path, a.codec) == (b.path, b.codec)
    assert np.array_equal(a.payload, b.payload)
    for name in _FIELDS:
        assert np.array_equal(getattr(a, name), getattr(b, name)), name


@pytest.mark.parametrize("codec", ["h264", "hevc", "av1", "vp9"])
def test_a_bundle_demuxed_into_a_sink_is_the_bundle_demuxed_alone(media, codec):
    """Bytes and every per-packet array equal, for each codec's form (Annex B filters, AV1's
    sequence header put in front of key frames, VP9 as is); a second bundle follows the
    first in the segment, and ``pack`` finds both without copying."""
    from vidloader.decoding.nvdec._annexb import demux_gops
    from vidloader.pipeline._payloads import SharedPayloads, unpack_payloads

    if codec not in media:
        pytest.skip(f"no {codec} test video")
    record = record_of(media[codec])
    gops = _all_frames(record)
    alone = [demux_gops(record, gops[:1]), demux_gops(record, gops[1:2] or gops[:1])]
    sink = SharedPayloads(capacity=4096)  # grows while the packets come
    into = [demux_gops(record, gops[:1], sink=sink), demux_gops(record, gops[1:2] or gops[:1], sink=sink)]
    for a, b in zip(alone, into):
        _same_bundle(a, b)
    assert sink.tell() == sum(b.payload.nbytes for b in alone)
    segment, light = sink.pack(into)
    assert into == [] and segment.size == sink.tell()
    assert [item[1:] for item in light] == [(0, alone[0].payload.nbytes),
                                             (alone[0].payload.nbytes, segment.size)]
    for a, b in zip(alone, unpack_payloads(light, segment)):
        _same_bundle(a, b)


def test_shared_payloads_grow_and_the_views_of_before_stay_valid():
    from vidloader.pipeline._payloads import SharedPayloads, unpack_payloads

    sink = SharedPayloads(capacity=4096)
    first = np.arange(3000, dtype=np.int64).view(np.uint8)  # 24,000 bytes: grows at once
    sink.write(first)
    early = sink.view(0, first.nbytes)
    sink.write(b"x" * 100_000)  # grows again: a new mapping of the larger segment
    assert np.array_equal(early, first)  # the first mapping is kept while a view lives
    assert sink.position(early) == 0 and sink.position(first) is None
    sink.truncate(first.nbytes + 10)  # a failed demux's bytes are forgotten
    sink.write(b"yz")
    assert sink.tell() == first.nbytes + 12
    tail = sink.view(first.nbytes, sink.tell())
    assert bytes(tail) == b"x" * 10 + b"yz"
    del early, tail
    segment, _ = sink.pack([])
    assert segment.size == first.nbytes + 12
    whole = unpack_payloads([(_Bundle(np.empty(0, np.uint8)), 0, segment.size)], segment)[0]
    assert np.array_equal(whole.payload[:first.nbytes], first)


@dataclasses.dataclass(frozen=True)
class _Bundle:
    payload: np.ndarray


def test_pack_writes_the_payloads_that_are_not_in_the_segment_and_discard_unlinks(tmp_path):
    import os

    from vidloader.pipeline._payloads import SharedPayloads, unpack_payloads

    sink = SharedPayloads()
    sink.write(b"abc")
    inside = _Bundle(sink.view(0, 3))
    outside = _Bundle(np.frombuffer(b"defg", np.uint8))
    segment, light = sink.pack([outside, None, inside])
    assert [x if x is None else x[1:] for x in light] == [(3, 7), None, (0, 3)]
    back = unpack_payloads(light, segment)
    assert bytes(back[0].payload) == b"defg" and bytes(back[2].payload) == b"abc"
    dropped = SharedPayloads()
    dropped.write(b"123")
    assert os.path.exists(f"/dev/shm/{dropped.name}")
    dropped.discard()
    assert not os.path.exists(f"/dev/shm/{dropped.name}")
    empty = SharedPayloads()
    assert empty.pack([None]) == (None, [None])
    assert not os.path.exists(f"/dev/shm/{empty.name}")


def test_a_failed_demux_takes_its_bytes_back_out_of_the_sink(media):
    """A GOP whose last frame is never found (a stale index here) fails after some of its
    packets were written: the sink is cut back to where the call began."""
    from vidloader.decoding.nvdec._annexb import demux_gops
    from vidloader.errors import CorruptVideoError
    from vidloader.pipeline._payloads import SharedPayloads

    record = record_of(media["h264"])
    gops = _all_frames(record)
    sink = SharedPayloads(capacity=4096)
    demux_gops(record, gops[:1], sink=sink)
    before = sink.tell()
    pts = record.pts.copy()
    pts[int(gops[0].frames[-1])] += 10**9  # a frame no packet carries
    with pytest.raises(CorruptVideoError, match="ends before"):
        demux_gops(dataclasses.replace(record, pts=pts), gops[:1], sink=sink)
    assert sink.tell() == before
    sink.discard()


_PEAK_PROBE = r"""
import sys
import numpy as np
from vidloader import build_index
from vidloader._utils._heap import trim_heap
from vidloader.decoding._base import GopRequest
from vidloader.decoding.nvdec import ContainerCache
from vidloader.pipeline._demux import demux_part
from vidloader.pipeline._messages import DemuxWorkerStart
from vidloader.pipeline._payloads import discard
from vidloader.decoding._base import DecodeTask

def kib(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1])

index = build_index([sys.argv[1]], num_workers=0, progress=False)
record = index[0]
ends = list(record.keyframes[1:]) + [record.num_frames]
gops = [GopRequest(int(k), np.arange(int(k), int(e))) for k, e in zip(record.keyframes, ends)]
tasks = [DecodeTask(0, record, tuple(gops))]
start = DemuxWorkerStart(0, index, False, None)
containers = ContainerCache()
for attempt in range(3):
    trim_heap()
    base = kib("VmRSS:")
    open("/proc/self/clear_refs", "w").write("5")  # the peak starts again from here
    segment, light, failed = demux_part(tasks, containers, start)
    print(segment.size / 1024, kib("VmHWM:") - base)
    discard(segment)
"""


def test_a_demux_worker_holds_its_part_about_once_at_its_peak(tmp_path):
    """The worker's peak resident memory over a part, against the part's bytes: 2.2-2.3 times
    them when packets went to bytes, then a bundle's array, then the segment; the segment
    itself and a little more now."""
    from vidloader.synthetic import VideoSpec, make_dataset

    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pytest.skip("this kernel does not let a process reset its peak RSS")
    # ~14 MB of large packets: 60 frames of 640x480 at 60 Mbit/s.
    (path,) = make_dataset(tmp_path, [VideoSpec(width=640, height=480, num_frames=60, gop=30,
                                                bitrate=60_000_000)], num_workers=1)
    out = subprocess.run([sys.executable, "-c", _PEAK_PROBE, str(path)], capture_output=True,
                         text=True, check=True)
    rows = [tuple(map(float, line.split())) for line in out.stdout.split("\n") if line]
    part_kib, peak_kib = rows[-1]  # warm: the file open and the code loaded
    assert part_kib > 8 * 1024
    assert peak_kib < 1.6 * part_kib, rows


def test_start_codes_are_found_across_the_scan_windows(monkeypatch):
    """``nal_header_positions`` scans in windows (its mask is as large as what it scans); a
    start code cut by a window's edge is found all the same."""
    from vidloader.decoding.nvdec import _nal

    payload = np.random.default_rng(0).integers(0, 3, 20_000).astype(np.uint8)
    whole = _nal.nal_header_positions(payload)
    assert len(whole) > 100
    for window in (1, 2, 3, 7, 4096):
        monkeypatch.setattr(_nal, "SCAN_BYTES", window)
        assert np.array_equal(_nal.nal_header_positions(payload), whole), window


def test_a_pool_removes_the_segments_its_stopped_workers_left():
    """A worker stopped while it wrote a part leaves the segment named; the pool's shutdown
    removes every segment with its prefix, and only those."""
    import os

    from vidloader.pipeline._payloads import SharedPayloads, discard_prefixed, segment_prefix

    mine, other = segment_prefix(), segment_prefix()
    assert mine != other
    left = [SharedPayloads(prefix=mine) for _ in range(2)]
    kept = SharedPayloads(prefix=other)
    for p in left:
        p.write(b"packets")
    assert discard_prefixed(mine) == 2
    assert not any(os.path.exists(f"/dev/shm/{p.name}") for p in left)
    assert os.path.exists(f"/dev/shm/{kept.name}")
    kept.discard()


def test_a_part_with_a_bad_gop_keeps_the_others_once_in_its_segment(media):
    """``skips_bad_files``: a task whose demux fails is demuxed again GOP by GOP; the GOPs that
    demux lie back to back in the part's segment and the bundle's payload is that run, so
    the segment holds exactly their bytes (not a joined copy beside them)."""
    from vidloader.decoding._base import DecodeTask
    from vidloader.decoding.nvdec import ContainerCache
    from vidloader.decoding.nvdec._annexb import demux_gops
    from vidloader.pipeline._demux import demux_part
    from vidloader.pipeline._messages import DemuxWorkerStart
    from vidloader.pipeline._payloads import unpack_payloads

    record = record_of(media["h264"])
    gops = _all_frames(record)[:3]
    pts = record.pts.copy()
    pts[int(gops[1].frames[-1])] += 10**9  # GOP 1's last frame: no packet carries it
    bad = dataclasses.replace(record, pts=pts)
    good = [demux_gops(record, [g]) for g in (gops[0], gops[2])]
    start = DemuxWorkerStart(0, None, True, None)
    segment, light, failed = demux_part([DecodeTask(0, bad, tuple(gops))], ContainerCache(), start)
    assert [f.kept for f in failed] == [(0, 2)]
    assert segment.size == sum(b.payload.nbytes for b in good)
    (bundle,) = unpack_payloads(light, segment)
    assert np.array_equal(bundle.payload, np.concatenate([b.payload for b in good]))
    assert bundle.num_gops == 2 and np.array_equal(bundle.sizes, np.concatenate([b.sizes for b in good]))
