"""``backend="combo"`` (CPU workers and NVDEC at once) and NVDEC's CPU fallback, on the CPU.

NVDEC is the fake of ``_fake_nvc`` here (PyNvVideoCodec and ``torch.cuda`` stand-ins in this
process, decoding with FFmpeg into NV12 surfaces converted by the real GPU kernels on CPU
tensors); the CPU workers are real spawned processes. The ``cuda`` tests of the same loader
run on the device machine.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

import vidloader
from vidloader import Clips, GopShuffle, RandomFrames, VideoLoader
from vidloader.synthetic import VideoSpec, make_dataset

from . import _fake_nvc
from .media import collect_batches, reference_frames

SPECS = [
    VideoSpec(codec="h264", width=96, height=64, num_frames=30, gop=10, bframes=2, seed=11),
    VideoSpec(codec="hevc", width=96, height=64, num_frames=24, gop=8, bframes=2, seed=12),
    VideoSpec(codec="h264", width=96, height=64, num_frames=20, gop=10, bframes=0, seed=13),
    # 4:4:4 H.264: NVDEC decodes no H.264 4:4:4; routed to the CPU
    VideoSpec(codec="h264", width=96, height=64, num_frames=16, gop=8, bframes=0, pix_fmt="yuv444p", seed=14),
]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("combo")
    paths = make_dataset(root, SPECS, names=[f"v{i}.mp4" for i in range(len(SPECS))], num_workers=2)
    index = vidloader.build_index(paths, num_workers=0, progress=False)
    refs = {v: reference_frames(r.path) for v, r in enumerate(index)}
    return index, refs


@pytest.fixture
def fake(monkeypatch):
    return _fake_nvc.install_on_cpu(monkeypatch)


def _loader(index, backend, **kw):
    kw.setdefault("sampler", RandomFrames(seed=3))
    kw.setdefault("batch_size", 6)
    kw.setdefault("num_workers", 2 if backend != "nvdec" else 0)
    if backend != "cpu":
        kw.setdefault("device", "cpu")
    return VideoLoader(index, backend=backend, **kw)


def _seen(batches):
    return [(int(v), int(f)) for b in batches for v, f in zip(b["video_index"], b["frame_index"])]


def _assert_close(batches, refs):
    for b in batches:
        for img, v, f in zip(b["frames"].numpy(), b["video_index"], b["frame_index"]):
            diff = np.abs(img.astype(int) - refs[int(v)][int(f)].astype(int))
            assert diff.mean() < 2.0 and diff.max() <= 6, (int(v), int(f))  # NV12 kernels vs swscale


def test_combo_delivers_the_cpu_stream_exactly_once_with_both_executors(dataset, fake):
    index, refs = dataset
    loader = _loader(index, "combo", lookahead=1)
    batches = collect_batches(loader)
    cpu = collect_batches(_loader(index, "cpu"))
    assert _seen(batches) == _seen(cpu)  # same samples, same order, whatever the share
    assert sorted(_seen(batches)) == [(v, f) for v, r in enumerate(index) for f in range(r.num_frames)]
    _assert_close(batches, refs)
    shares = loader.stats["rows_by_executor"]
    assert shares.get("cpu", 0) > 0 and shares.get("nvdec", 0) > 0, shares
    assert sum(shares.values()) == index.total_frames
    # the driver's caps refuse the 4:4:4 H.264 file and the HEVC file below NVDEC's minimum
    # HEVC size (144x144): their rows all came from the CPU side
    refusals = loader.nvdec_refusals
    assert sorted(refusals) == [1, 3]
    assert "HEVC" in refusals[1] and "below NVDEC's minimum 144×144" in refusals[1]
    assert "H.264" in refusals[3] and "4:4:4" in refusals[3]


@pytest.mark.parametrize("share", [0.0, 1.0])
def test_combo_share_deals_a_fixed_split(dataset, fake, share):
    index, refs = dataset
    loader = _loader(index, "combo", combo_share=share, lookahead=1)
    batches = collect_batches(loader)
    assert sorted(_seen(batches)) == [(v, f) for v, r in enumerate(index) for f in range(r.num_frames)]
    pool_rows = loader.stats["rows_by_executor"]
    if share == 0.0:
        assert set(pool_rows) == {"cpu"}
    else:  # every unit NVDEC could take went to it; units mostly of refused videos to the CPU
        refused = sum(index[v].num_frames for v in loader.nvdec_refusals)
        assert pool_rows["nvdec"] > 0 and pool_rows.get("cpu", 0) <= refused, pool_rows
        fallbacks = loader.stats["cpu_fallback_files"]
        # refused rows inside NVDEC's units went to its CPU fallback, routed up front: nothing failed
        assert set(fallbacks) <= {index[v].path for v in loader.nvdec_refusals}
        assert set(fallbacks.values()) == {"routed"}
    _assert_close(batches, refs)


def test_combo_clips_and_gop_blocks(dataset, fake):
    index, refs = dataset
    for sampler in (Clips(sequence_length=4, stride=2, seed=1), GopShuffle(seed=2)):
        got = collect_batches(_loader(index, "combo", sampler=sampler))
        want = collect_batches(_loader(index, "cpu", sampler=sampler))
        for g, w in zip(got, want, strict=True):
            assert torch.equal(g["video_index"], w["video_index"])
            assert torch.equal(g["frame_index"], w["frame_index"])
            diff = (g["frames"].int() - w["frames"].int()).abs()
            assert diff.float().mean() < 2.0


def test_combo_resumes_mid_epoch(dataset, fake):
    index, _ = dataset
    full = _seen(collect_batches(_loader(index, "combo")))
    first = _loader(index, "combo")
    it = iter(first)
    head = [next(it) for _ in range(3)]
    state = first.state_dict()
    it.close()
    first.shutdown()
    resumed = _loader(index, "combo")
    resumed.load_state_dict(state)
    assert _seen(head) + _seen(collect_batches(resumed)) == full


def test_nvdec_routes_what_it_cannot_decode_to_the_cpu(dataset, fake):
    index, refs = dataset
    for workers in (0, 2):
        loader = _loader(index, "nvdec", num_workers=workers)
        batches = collect_batches(loader)
        assert sorted(_seen(batches)) == [(v, f) for v, r in enumerate(index) for f in range(r.num_frames)]
        _assert_close(batches, refs)
        assert loader.stats["cpu_fallback_files"][index[3].path] == "routed"


def test_fallback_error_refuses_at_construction(dataset, fake):
    index, _ = dataset
    with pytest.raises(vidloader.UnsupportedCodecError, match=r"v1.mp4.*minimum 144×144 \(1 more files too\).*fallback=.cpu."):
        _loader(index, "nvdec", fallback="error")


def test_a_file_failing_on_nvdec_is_retried_once_on_the_cpu(dataset, fake):
    index, refs = dataset
    fake.fail_decodes = 10**6  # every NVDEC decode call raises: every file is retried on the CPU
    loader = _loader(index, "nvdec", num_workers=0, lookahead=1)
    batches = collect_batches(loader)
    assert sorted(_seen(batches)) == [(v, f) for v, r in enumerate(index) for f in range(r.num_frames)]
    _assert_close(batches, refs)
    reasons = loader.stats["cpu_fallback_files"]
    assert sorted(reasons) == sorted(r.path for r in index)
    assert all(why == "routed" or why.startswith("failed on nvdec") for why in reasons.values())
    assert any("fake NVDEC failure" in why for why in reasons.values()), reasons
    assert loader.stats["skipped_samples"] == 0


def test_combo_config_mistakes_are_caught_at_construction(dataset):
    index, _ = dataset
    with pytest.raises(vidloader.ConfigError, match="combo_share"):
        VideoLoader(index, backend="nvdec", combo_share=0.5)
    with pytest.raises(vidloader.ConfigError, match="combo_share"):
        VideoLoader(index, backend="combo", combo_share=1.5)
    with pytest.raises(vidloader.ConfigError, match="fallback"):
        VideoLoader(index, backend="nvdec", fallback="gpu")


@pytest.mark.cuda
def test_combo_on_the_gpu_matches_the_cpu_stream(dataset):
    """Real NVDEC and real CPU workers: the CPU stream's samples, each once, on the GPU; the
    4:4:4 file (and the 96×64 HEVC, under NVDEC's minimum size) decoded on the CPU."""
    if not torch.cuda.is_available():
        pytest.skip("needs an NVIDIA GPU with PyNvVideoCodec (cuda marker)")
    index, refs = dataset
    loader = VideoLoader(index, sampler=RandomFrames(seed=3), batch_size=6, backend="combo",
                         num_workers=2, lookahead=1)
    batches = collect_batches(loader)
    assert all(b["frames"].is_cuda for b in batches)
    cpu = collect_batches(_loader(index, "cpu"))
    assert _seen(batches) == _seen(cpu)
    _assert_close([{**b, "frames": b["frames"].cpu()} for b in batches], refs)
    assert sum(loader.stats["rows_by_executor"].values()) == index.total_frames
    assert loader.stats["cpu_fallback_files"][index[3].path] == "routed"


def test_combo_hands_out_small_units_and_nvdec_gathers_a_batch(dataset, fake, monkeypatch):
    """Row units keep in-order batches from waiting on a slow CPU unit (the H100 run of
    benchmarks/results/gpu/combo-2 saw whole-batch CPU units take every slot and NVDEC idle);
    NVDEC gathers consecutive units back into up to ``lookahead`` batches' rows, as in
    separation mode (one batch per NVDEC unit shared fewer GOPs)."""
    from vidloader.pipeline import _combo

    submitted, to_gpu = [], []
    real_submit, real_to_gpu = _combo.ComboPool.submit, _combo.ComboPool._to_gpu
    monkeypatch.setattr(_combo.ComboPool, "submit",
                        lambda self, w, t: (submitted.append(_combo._rows(t)), real_submit(self, w, t))[1])
    monkeypatch.setattr(_combo.ComboPool, "_to_gpu",
                        lambda self, t: (to_gpu.append(_combo._rows(t)), real_to_gpu(self, t))[1])
    index, refs = dataset
    loader = _loader(index, "combo", batch_size=6, num_workers=3, lookahead=2)
    batches = collect_batches(loader)
    assert sorted(_seen(batches)) == [(v, f) for v, r in enumerate(index) for f in range(r.num_frames)]
    _assert_close(batches, refs)
    assert _combo.combo_split(3) == (3, 1)  # 3 CPU decoders, and 1 demux worker for NVDEC
    assert max(submitted) == 2  # ceil(6 rows / 4 ways: 3 CPU workers and NVDEC)
    assert max(to_gpu) <= 12 and sum(submitted) == index.total_frames  # lookahead 2 × 6 rows


def test_row_units_cut_each_batch_and_a_short_last_one():
    from vidloader.pipeline._units import row_units

    class Plan:
        def __len__(self):
            return 3

        def batch(self, b):
            return type("B", (), {"batch_size": 5 if b < 2 else 3})()

    cuts = [(u[0].batch, *u[0].rows(5 if u[0].batch < 2 else 3)) for u in row_units(Plan(), 1, 2)]
    assert cuts == [(1, 0, 2), (1, 2, 4), (1, 4, 5), (2, 0, 2), (2, 2, 3)]


def test_combo_completes_the_epoch_on_nvdec_when_a_cpu_worker_is_killed(dataset, fake):
    """Item 5 of the combo issue: one executor dies, the epoch completes on the other; every
    sample once, in the CPU stream's order, and every process joined at shutdown."""
    import os
    import signal

    index, refs = dataset
    want = _seen(collect_batches(_loader(index, "cpu")))
    # One CPU worker (and one demux worker): with two, the epoch can end on the other one
    # before the dead one is missed, and nothing would show the combo carried on without it.
    loader = _loader(index, "combo", num_workers=1)
    it = iter(loader)
    got = [next(it)]
    pool = loader._pool
    os.kill(pool.cpu.procs[0].pid, signal.SIGKILL)
    got += list(it)
    assert _seen(got) == want
    _assert_close(got, refs)
    assert len(pool.lost_workers) == 1 and "killed by signal 9" in pool.lost_workers[0]
    loader.shutdown()
    assert not any(p.is_alive() for p in pool.cpu.procs)


def test_combo_share_completes_on_nvdec_when_its_only_cpu_worker_dies(dataset, fake):
    """With a fixed split and every CPU worker dead, NVDEC takes the CPU's share too (found
    by review: the CPU's share queued for no one and the epoch hung)."""
    import os
    import signal

    index, _ = dataset
    want = _seen(collect_batches(_loader(index, "cpu", num_workers=1)))
    loader = _loader(index, "combo", num_workers=1, combo_share=0.5, lookahead=1, prefetch=1)
    it = iter(loader)
    got = [next(it)]
    pool = loader._pool
    os.kill(pool.cpu.procs[0].pid, signal.SIGKILL)
    got += list(it)
    assert _seen(got) == want and len(pool.lost_workers) == 1
    loader.shutdown()


def test_combo_cpu_workers_yield_to_the_process_feeding_nvdec(dataset, fake):
    """On the H100 the combo's CPU decoders, one per core at equal priority, starved the
    threads that feed NVDEC (combo 138 frames/s against NVDEC alone 364): they run niced."""
    import os

    from vidloader.pipeline._combo import COMBO_CPU_NICE

    index, _ = dataset
    loader = _loader(index, "combo", num_workers=2)
    it = iter(loader)
    next(it)
    own = os.getpriority(os.PRIO_PROCESS, 0)
    try:
        assert COMBO_CPU_NICE > 0
        for p in loader._pool.cpu.procs:
            assert os.getpriority(os.PRIO_PROCESS, p.pid) == min(19, own + COMBO_CPU_NICE)
        # NVDEC's demux worker keeps the loader's priority: it feeds the faster side.
        (demux,) = loader._pool.gpu.procs
        assert os.getpriority(os.PRIO_PROCESS, demux.pid) == own
    finally:
        loader.shutdown()


def test_combo_cpu_workers_keep_off_the_reserved_cores(dataset, fake, monkeypatch):
    """The CPU decoders run only on the cores the combo does not keep for the threads feeding
    NVDEC (which wait for a core behind them otherwise: ``session16-1``); NVDEC's demux worker
    and this process keep every core."""
    import os

    from vidloader.pipeline import _combo

    every = sorted(os.sched_getaffinity(0))
    with monkeypatch.context() as m:
        m.setattr(_combo.os, "sched_getaffinity", lambda pid: {0, 1, 2})  # 3 cores
        assert _combo.cpu_decoder_cores(1) == (1, 2)
        assert _combo.cpu_decoder_cores(2) is None  # one core would remain: anywhere
        assert _combo.cpu_decoder_cores(0) is None
        # with SMT a reserved core's sibling threads are reserved with it
        m.setattr(_combo.os, "sched_getaffinity", lambda pid: set(range(8)))
        m.setattr(_combo, "_siblings", lambda c: {c % 4, c % 4 + 4})
        assert _combo.physical_cores(list(range(8))) == [(0, 4), (1, 5), (2, 6), (3, 7)]
        assert _combo.cpu_decoder_cores(2) == (2, 3, 6, 7)
    index, _ = dataset
    asked = []
    monkeypatch.setattr(_combo, "cpu_decoder_cores", lambda n: asked.append(n) or (every[-1],))
    loader = _loader(index, "combo", num_workers=2)
    it = iter(loader)
    next(it)
    try:
        assert asked == [1]  # by default, a core per demux worker (one here)
        for p in loader._pool.cpu.procs:
            assert os.sched_getaffinity(p.pid) == {every[-1]}
        (demux,) = loader._pool.gpu.procs
        assert sorted(os.sched_getaffinity(demux.pid)) == every
    finally:
        loader.shutdown()


def test_cpu_workers_take_the_newest_unit_and_only_beyond_nvdecs_horizon(monkeypatch):
    """Batches are delivered in order: a CPU unit that NVDEC catches up with holds every later
    batch back (bursts between 2-5 s stalls on the H100). NVDEC takes the oldest units; a CPU
    worker the newest, and only where NVDEC, at its pace, would not reach it before the CPU is
    done with it."""
    import collections
    from types import SimpleNamespace

    from vidloader.pipeline import _combo

    def unit(i):
        return SimpleNamespace(unit=i, plans=[SimpleNamespace(batch_size=8)], slot_ids=[i])

    pool = _combo.ComboPool.__new__(_combo.ComboPool)  # the dealing logic alone
    pool._cpu_queue, pool._queue = collections.deque(), _combo._Units()
    pool._fenced = collections.Counter()
    clock = [100.0]
    monkeypatch.setattr(_combo.time, "monotonic", lambda: clock[0])
    pool._pace = pace = _combo._Pace()
    for i in range(10):
        pool._queue.append(unit(i))
    assert pool._queue.rows == 80
    assert pool._take_for_cpu().unit == 9  # nothing measured yet: the newest
    pace.gpu_busy(True)
    clock[0] += 1.0
    pace.gpu_filled(100)  # 100 rows in 1 s of busy time
    pace.gpu_busy(False)
    clock[0] += 5.0  # idle time does not count
    pace.gpu_busy(True)
    clock[0] += 0.5
    pace.gpu_filled(50)
    assert pace.gpu_rows_per_s == pytest.approx(100)
    pace.cpu_done(0.4)
    assert pace.horizon_rows() == pytest.approx(_combo.CPU_HORIZON_SAFETY * 40)  # 60 rows
    assert pool._take_for_cpu().unit == 8  # 64 rows ahead of it
    assert pool._take_for_cpu() is None  # unit 7: 56 rows ahead, NVDEC would catch up
    pool._cpu_queue.append(unit(20))  # a unit only the CPU may take goes regardless
    assert pool._take_for_cpu().unit == 20
    assert [pool._queue.popleft().unit for _ in range(8)] == list(range(8)) and pool._queue.rows == 0


def test_combo_with_a_slow_nvdec_keeps_the_cpu_stream(dataset, fake, monkeypatch):
    """Where the CPU is the faster side (small clips, W4 in the issue: CPU 2,849-3,128
    frames/s against NVDEC 1,470 on the H200), NVDEC still takes the oldest units and the CPU
    the newest: the stream stays the CPU backend's and both sides fill rows. (Which side fills
    more is timing on a 15-batch epoch, where NVDEC's first grab of units dominates; the
    dealing in that regime is checked without timing below.)"""
    import time

    from . import _fake_nvc as fake_module

    decode = fake_module.FakeDecoder.Decode

    def slow(self, pkt):
        time.sleep(0.02)
        return decode(self, pkt)

    monkeypatch.setattr(fake_module.FakeDecoder, "Decode", slow)
    index, refs = dataset
    loader = _loader(index, "combo", num_workers=3, lookahead=1)
    batches = collect_batches(loader)
    assert _seen(batches) == _seen(collect_batches(_loader(index, "cpu")))
    _assert_close(batches, refs)
    shares = loader.stats["rows_by_executor"]
    assert shares.get("cpu", 0) > 0 and shares.get("nvdec", 0) > 0, shares


def test_a_slow_nvdec_leaves_the_cpu_every_unit_but_its_own_head():
    """NVDEC at 10 rows/s, a CPU unit in 0.1 s: the horizon is 1.5 rows, so free CPU workers
    take every queued unit from the newest down to the one right behind NVDEC's next."""
    import collections
    from types import SimpleNamespace

    from vidloader.pipeline import _combo

    pool = _combo.ComboPool.__new__(_combo.ComboPool)  # the dealing logic alone
    pool._cpu_queue, pool._queue, pool._pace = collections.deque(), _combo._Units(), _combo._Pace()
    pool._fenced = collections.Counter()
    pool._pace.gpu_rows_per_s, pool._pace.cpu_unit_s = 10.0, 0.1
    for i in range(6):
        pool._queue.append(SimpleNamespace(unit=i, plans=[SimpleNamespace(batch_size=8)], slot_ids=[i]))
    taken = []
    while (task := pool._take_for_cpu()) is not None:
        taken.append(task.unit)
    assert taken == [5, 4, 3, 2, 1] and [t.unit for t in pool._queue] == [0]


def test_combo_takes_cpu_reports_while_nvdec_decodes(dataset, fake, monkeypatch):
    """While NVDEC decodes its oldest unit, the combo still takes the CPU workers' reports
    and deals them new units. NVDEC is held here until three CPU reports have come in: the
    combo used to block on NVDEC's unit (and the CPU workers idled; the W4 clips ran at
    NVDEC's speed alone), so the reports never came and NVDEC was released only by the
    timeout."""
    import threading

    from vidloader.pipeline import _combo

    from . import _fake_nvc as fake_module

    release, timed_out, reports = threading.Event(), [], []
    decode = fake_module.FakeDecoder.Decode

    def held(self, pkt):
        if not release.is_set() and not release.wait(timeout=20):
            timed_out.append(True)
            release.set()
        return decode(self, pkt)

    from_cpu = _combo.ComboPool._from_cpu

    def counting(self, msg):
        msg = from_cpu(self, msg)
        if msg is not None:
            reports.append(msg)
            if len(reports) >= 3:
                release.set()
        return msg

    monkeypatch.setattr(fake_module.FakeDecoder, "Decode", held)
    monkeypatch.setattr(_combo.ComboPool, "_from_cpu", counting)
    index, refs = dataset
    batches = collect_batches(_loader(index, "combo", num_workers=3, lookahead=1))
    assert not timed_out, "the combo waited for NVDEC and took no CPU report meanwhile"
    assert _seen(batches) == _seen(collect_batches(_loader(index, "cpu")))
    _assert_close(batches, refs)


def test_idle_nvdec_takes_over_the_slow_cpu_unit_holding_the_oldest_batch(monkeypatch):
    """With COMBO_STEAL, NVDEC takes the parts of the CPU unit holding the oldest batch
    (older than every unit queued or in flight on NVDEC), one unit at a time, when it would finish them first at the
    measured paces, and never a unit already reporting (its other parts are on their way).
    The worker's later reports of that unit are dropped (one message per part reaches the
    scheduler) and, until it has reported them all, no CPU unit is dealt into the unit's
    slots (the worker may still write their shared memory); the next unfenced unit goes."""
    import collections
    from types import SimpleNamespace

    from vidloader.pipeline import _combo
    from vidloader.pipeline._messages import Failure, FillTask, RowsFilled

    def plan(batch, rows=4):
        return SimpleNamespace(batch_index=batch, batch_size=rows, video_indices=np.zeros(rows, int))

    def filled(unit, batch, slot, start=0):
        return RowsFilled(batch, slot, np.ones(4, bool), [], {}, start, "cpu", {}, unit)

    clock = [100.0]
    monkeypatch.setattr(_combo.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(_combo, "CPU_HORIZON_SAFETY", 0.0)  # the CPU takes the newest unit
    pool = _combo.ComboPool.__new__(_combo.ComboPool)  # the dealing logic alone
    pool.config = SimpleNamespace(cpu_only=None)
    pool._cpu_queue, pool._queue, pool._gpu_queue = collections.deque(), _combo._Units(), collections.deque()
    pool._fenced, pool._stolen, pool._gpu_parts, pool.steals = collections.Counter(), {}, {}, 0
    pool.gpu_room = 2
    pool._cpu_load = [2, 1]
    pool._pace = _combo._Pace()
    sent = []
    monkeypatch.setattr(pool, "_to_gpu", lambda task, first=False: sent.append((task, first))
                        or pool._gpu_parts.update({task.unit: 1}))
    old = FillTask([6], [plan(3)], [0], unit=7)  # batch 3, slot 6
    sibling = FillTask([6], [plan(3, rows=2)], [4], unit=8)  # the rest of batch 3
    pool._cpu_units = {7: _combo._CpuUnit(0, old, started=99.0), 8: _combo._CpuUnit(1, sibling, started=99.9)}
    monkeypatch.setattr(_combo, "COMBO_STEAL", False)
    assert pool._steal_candidate() is None
    monkeypatch.setattr(_combo, "COMBO_STEAL", True)
    assert pool._steal_candidate() is None  # no pace measured yet
    pool._pace.gpu_rows_per_s, pool._pace.cpu_unit_s = 100.0, 1.5
    pool._gpu_parts = {3: 1, 4: 1}
    assert pool._steal_candidate() is None  # NVDEC decodes older units (3, 4) itself
    pool._gpu_parts = {9: 1, 10: 1, 11: 1}
    assert pool._steal_candidate() == 7  # at its room with newer units: they wait on unit 7
    pool._gpu_parts = {5: 1}
    assert pool._steal_candidate() is None  # NVDEC decodes an older unit (5) itself
    pool._gpu_parts = {9: 1}
    assert pool._steal_candidate() == 7  # 4 rows in 0.04 s against 1 s of the CPU's left
    assert pool._steal_candidate(FillTask([2], [plan(5)], [0], unit=12)) == 7  # newer queued
    assert pool._steal_candidate(FillTask([2], [plan(2)], [0], unit=5)) is None  # older queued
    pool._pace.gpu_rows_per_s = 4.0
    assert pool._steal_candidate() is None  # 1 s on NVDEC: the CPU finishes first
    clock[0] = 102.0  # 3 s on a unit of 1.5 s on average: expected to take 3 s more
    assert pool._steal_candidate() == 7
    clock[0] = 100.0
    pool._pace.gpu_rows_per_s = 100.0
    pool._cpu_units[7].reported.add((3, 0))
    assert pool._steal_candidate() is None  # already reporting
    pool._cpu_units[7].reported.clear()
    pool._gpu_parts = {}
    pool._steal(7)
    assert [(t.unit, t.slot_ids, [p.batch_index for p in t.plans], first) for t, first in sent] == [
        (7, [6], [3], True)]  # decoded before NVDEC's units not started yet
    assert pool.steals == 1 and dict(pool._fenced) == {6: 1} and 7 not in pool._cpu_units
    assert pool._steal_candidate() is None  # one at a time: unit 8 is newer than NVDEC's 7
    pool._cpu_queue.append(FillTask([6], [plan(4)], [0], unit=11))  # the CPU's only, fenced
    pool._cpu_queue.append(FillTask([2], [plan(6)], [0], unit=12))  # the CPU's only
    pool._queue.append(FillTask([6], [plan(4)], [4], unit=9))
    assert pool._take_for_cpu().unit == 12  # the fenced unit 11 waits; the next one goes
    assert pool._take_for_cpu() is None  # unit 9's slot 6 is fenced: the unit is NVDEC's
    pool._queue.append(FillTask([1], [plan(5)], [0], unit=10))
    assert pool._take_for_cpu().unit == 10
    # The sibling unit 8 fails: its failure reaches the scheduler, the fence stays.
    failure = Failure(3, [6], "RuntimeError('bad file')", "", unit=8)
    assert pool._from_cpu(failure) is failure
    assert dict(pool._fenced) == {6: 1} and 7 in pool._stolen
    assert pool._from_cpu(filled(7, 3, 6)) is None  # the worker's late report: dropped
    assert not pool._fenced and not pool._stolen and pool._cpu_load == [1, 1]
    assert [pool._take_for_cpu().unit for _ in range(2)] == [11, 9]  # the fence is lifted


def test_combo_with_nvdec_taking_over_cpu_units_delivers_the_cpu_stream(dataset, fake, monkeypatch):
    """NVDEC taking over every CPU unit it can, whenever it has room (the policy of
    ``_steal_candidate`` is checked above; here the bookkeeping, with real worker processes):
    the epochs are still the CPU stream, each sample once, with the right pixels, though the
    workers go on decoding units NVDEC took and report them late, into fenced slots."""
    from vidloader.pipeline import _combo

    def eager(self, head=None):
        if len(self._gpu_parts) >= self.gpu_room or not self._cpu_units:
            return None
        unit = min(self._cpu_units)
        held = self._cpu_units[unit]  # _steal takes units none of whose parts is reported
        return unit if not held.reported and not self._needs_cpu(held.task) else None

    monkeypatch.setattr(_combo.ComboPool, "_steal_candidate", eager)
    steals = []
    steal = _combo.ComboPool._steal
    monkeypatch.setattr(_combo.ComboPool, "_steal", lambda self, unit: steals.append(unit) or steal(self, unit))
    index, refs = dataset
    loader = _loader(index, "combo", num_workers=2, lookahead=1, persistent_workers=True)
    try:
        for epoch in range(3):
            cpu = _loader(index, "cpu")
            cpu.set_epoch(epoch)
            loader.set_epoch(epoch)
            got = collect_batches(loader)
            assert _seen(got) == _seen(collect_batches(cpu))  # the CPU stream, each sample once
            _assert_close(got, refs)
        pool = loader._pool
        assert steals and pool.steals == len(steals)
    finally:
        loader.shutdown()


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="reads /proc/PID/maps (Linux)")
def test_combo_cpu_and_demux_workers_load_no_torch(dataset, fake):
    """The combo's CPU decoders (forks of the decode server, their config without the device,
    their slots in one shared file) and its demux workers map neither libtorch nor libcuda
    while they work."""
    index, _ = dataset
    loader = _loader(index, "combo", num_workers=2, persistent_workers=True)
    try:
        batches = [b for _, b in zip(range(3), loader)]
        pool = loader._pool
        procs = [*pool.cpu.procs, *pool.gpu.procs]
        maps = {}
        for p in procs:
            with open(f"/proc/{p.pid}/maps") as f:
                maps[f"{type(p).__name__} {p.pid}"] = f.read()
    finally:
        loader.shutdown()
    assert len(batches) == 3 and len(maps) == len(procs) >= 3
    for name, m in maps.items():
        assert "libtorch" not in m and "libcuda" not in m, name
