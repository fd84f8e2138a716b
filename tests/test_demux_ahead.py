"""The packets demuxed ahead of NVDEC stay within ``nvdec_options["demux_ahead_bytes"]``
(``pipeline._pool.DemuxAhead``): bounded by the worker count alone, W1's uniform random
frames held 4.3 GiB in segments sent but not yet received (issue 16 item 1, ``session20-2``)."""

from __future__ import annotations

import collections
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from vidloader.errors import ConfigError
from vidloader.pipeline._config import DEFAULT_DEMUX_AHEAD_BYTES, demux_ahead_bytes
from vidloader.pipeline._pool import DemuxAhead, estimate_packet_bytes


def _sent(ahead: DemuxAhead) -> list[int]:
    return [task for _, task in ahead.release()]


def test_units_go_while_their_bytes_fit_and_the_estimates_learn_from_what_came():
    ahead = DemuxAhead(1000)
    for key in range(6):
        ahead.hold(key, [(key % 2, key)], 300)
    assert _sent(ahead) == [0, 1, 2]  # 900 estimated; a fourth would be 1,200
    ahead.received(0, 600)  # twice its estimate: the others now count 600 each
    assert ahead.bytes_ahead() == 1800 and _sent(ahead) == []
    ahead.started(0)
    assert ahead.bytes_ahead() == 1200 and _sent(ahead) == []
    ahead.started(1)
    assert _sent(ahead) == []  # 600 ahead, and the next counts 600: 1,200 > 1,000
    ahead.started(2)
    assert _sent(ahead) == [3]  # nothing ahead: the oldest held unit always goes
    assert ahead.peak_bytes == 900 and len(ahead) == 1


def test_a_unit_in_parts_counts_its_estimate_until_every_part_is_here():
    ahead = DemuxAhead(10_000)
    ahead.hold(0, [(0, "a"), (1, "b")], 1000)
    assert _sent(ahead) == ["a", "b"]
    ahead.received(0, 100)
    assert ahead.bytes_ahead() == 1000  # one part of two: still the estimate
    ahead.received(0, 1500)
    assert ahead.bytes_ahead() == 1600  # all here: what came


def test_a_unit_asked_first_goes_at_once_and_no_limit_sends_everything():
    ahead = DemuxAhead(100)
    ahead.hold(0, [(0, 0)], 90)
    ahead.hold(1, [(0, 1)], 90)
    assert _sent(ahead) == [0]
    ahead.hold(2, [(0, 2)], 90, first=True)  # the combo's takeover of the oldest batch
    assert _sent(ahead) == [2]
    unbounded = DemuxAhead(None)
    for key in range(5):
        unbounded.hold(key, [(0, key)], 1e12)
    assert _sent(unbounded) == [0, 1, 2, 3, 4]


def test_the_option_takes_bytes_or_a_size_string_or_none():
    assert demux_ahead_bytes(None) == DEFAULT_DEMUX_AHEAD_BYTES
    assert demux_ahead_bytes({"demux_ahead_bytes": "512MiB"}) == 512 << 20
    assert demux_ahead_bytes({"demux_ahead_bytes": 1 << 20}) == 1 << 20
    assert demux_ahead_bytes({"demux_ahead_bytes": None}) is None
    for bad in (0, -5, "lots", 1.5, True):
        with pytest.raises(ConfigError, match=r"nvdec_options\['demux_ahead_bytes'\].*512MiB"):
            demux_ahead_bytes({"demux_ahead_bytes": bad})


def test_the_estimate_is_within_a_small_factor_of_the_packets_demuxed(media):
    """The index's bytes per frame times the frames demuxed, against the bytes the demux
    gives for random frames of the test videos (keyframes weigh more than the mean)."""
    from vidloader import RandomFrames, build_index
    from vidloader.decoding.nvdec._annexb import demux_gops
    from vidloader.planning import plan_tasks

    index = build_index([media["h264"], media["hevc"], media["h264_large"]], num_workers=0,
                        progress=False)
    plan = RandomFrames(seed=3).plan_epoch(index, epoch=0, batch_size=16)
    for b in range(3):
        tasks = plan_tasks([plan.batch(b)], index)
        got = sum(demux_gops(t.record, t.gops).payload.nbytes for t in tasks)
        assert 0.3 < got / estimate_packet_bytes(tasks) < 3, (b, got, estimate_packet_bytes(tasks))


def test_the_separation_pool_holds_units_past_the_bytes_and_sends_them_as_units_start(monkeypatch):
    """Wired into the pool: a submit sends what fits, a unit starting decoding lets the next
    ones go, and a worker's failure of a unit takes it out of the bytes ahead."""
    import vidloader.pipeline._pool as pool_mod
    from vidloader.pipeline._messages import Failure, FillTask, PacketsDemuxed

    from .test_nvdec_logic import _bare_separation_pool

    pool = _bare_separation_pool(units_decoding=2, batch_rows=4)
    pool.demux_ahead = DemuxAhead(250)
    pool.assembler = pool.slots = None  # 100 bytes estimated a unit
    pool._keys, pool._order, pool.index = iter(range(10)), collections.deque(), None
    video = SimpleNamespace(size_bytes=1000, num_frames=100)  # 10 bytes a frame
    task = SimpleNamespace(video_index=0, record=video, gops=[SimpleNamespace(keyframe=0, last=9)])
    monkeypatch.setattr(pool_mod, "plan_tasks", lambda plans, index: [task])
    monkeypatch.setattr(pool_mod, "demux_spans", lambda tasks, workers: [(0, 1)])
    monkeypatch.setattr(pool_mod, "unpack_payloads", lambda light, segment: light)
    monkeypatch.setattr(pool_mod, "start_unit_messages", lambda *args, **kwargs: None)
    monkeypatch.setattr(pool_mod.SeparationPool, "num_workers", 2, raising=False)
    sent = []
    monkeypatch.setattr(pool, "put", lambda worker, msg: sent.append(msg.key), raising=False)
    plans = [SimpleNamespace(batch_index=0, batch_size=4)]
    for _ in range(5):
        pool.submit(0, FillTask([0], plans, [0]))
    assert sent == [0, 1]  # 200 estimated; a third would be 300
    pool._receive(PacketsDemuxed(0, ["b0"], [], 0, SimpleNamespace(size=100)))
    pool._start(0, *pool._ready.pop(0))
    assert sent == [0, 1, 2]
    pool._with_batch_index(Failure(-1, None, "boom", "", None, unit_key=1))
    assert sent == [0, 1, 2, 3] and len(pool.demux_ahead) == 2
    assert np.isclose(pool.demux_ahead.bytes_ahead(), 200)
    # Unit 2 weighs a tenth of its estimate: the scale falls, and the next unit fits now.
    pool._receive(PacketsDemuxed(2, ["b2"], [], 0, SimpleNamespace(size=10)))
    assert sent == [0, 1, 2, 3, 4]


def test_units_left_to_the_cpu_count_nothing_and_teach_nothing():
    """Videos NVDEC cannot decode go to the CPU (``fallback="cpu"``): the workers demux none
    of their packets, so they count 0 in a unit's estimate, and a unit of them alone (0
    bytes) does not scale the next estimates down to nothing."""
    video = SimpleNamespace(size_bytes=1000, num_frames=100)
    tasks = [SimpleNamespace(video_index=v, record=video,
                             gops=[SimpleNamespace(keyframe=0, last=9)]) for v in (0, 1)]
    assert estimate_packet_bytes(tasks) == 200
    assert estimate_packet_bytes(tasks, np.array([True, False])) == 100
    ahead = DemuxAhead(250)
    ahead.hold(0, [(0, 0)], 100)
    _sent(ahead)
    ahead.received(0, 0)  # all on the CPU
    ahead.started(0)
    for key in (1, 2, 3):
        ahead.hold(key, [(0, key)], 100)
    assert _sent(ahead) == [1, 2]  # still 100 each: the empty unit taught nothing


@pytest.mark.parametrize("bound", [1, "64KiB"])
def test_a_loader_with_a_tight_bound_delivers_the_unbounded_loaders_batches(media, monkeypatch, bound):
    """Separation mode on the stand-in NVDEC (CPU): with the packets ahead bounded to a byte
    (one unit at a time: the oldest held unit goes whenever nothing is ahead) or to a few
    units, the epoch completes with the batches of the unbounded loader, in order."""
    from vidloader import RandomFrames, VideoLoader
    from vidloader.index import VideoIndex

    from . import _fake_nvc
    from ._nvdec_media import record_of

    _fake_nvc.install_on_cpu(monkeypatch)
    index = VideoIndex([record_of(media[n]) for n in ("h264", "hevc", "h264_small")])

    def epoch(ahead):
        loader = VideoLoader(index, sampler=RandomFrames(seed=4), batch_size=6, size=(24, 24),
                             backend="nvdec", num_workers=2, device="cpu",
                             nvdec_options={"demux_ahead_bytes": ahead})
        batches, most_ahead = [], 0
        try:
            for b in loader:
                batches.append((b["frames"].clone(), b["video_index"].clone(),
                                b["frame_index"].clone()))
                most_ahead = max(most_ahead, len(loader._pool.demux_ahead))
            limit = loader.config.demux_ahead_bytes
        finally:
            loader.shutdown()
        return batches, limit, most_ahead

    reference, unbounded, _ = epoch(None)
    bounded, limit, most_ahead = epoch(bound)
    assert unbounded is None and limit == (1 if bound == 1 else 64 << 10)
    if bound == 1:
        assert most_ahead <= 1  # one unit demuxed ahead at a time
    assert len(bounded) == len(reference) > 3
    for got, want in zip(bounded, reference, strict=True):
        assert all(torch.equal(a, b) for a, b in zip(got, want))
