"""CPU tests of the NVDEC executor's logic against a fake PyNvVideoCodec (``_fake_nvc``).

They check what does not need a GPU: frame numbering (with and without timestamp
pass-through), surface recycling, decoder reuse and reconfiguration, the frame and packet
caches, the decoder pool, separation mode and the error paths. ``test_nvdec.py`` repeats the
important ones on a real GPU.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from vidloader.decoding.nvdec._annexb import demux_gops
from vidloader.decoding.nvdec._executor import NvdecExecutor
from vidloader.errors import BackendUnavailableError, CorruptVideoError, UnsupportedCodecError
from vidloader.pipeline._assemble import copy_runs
from vidloader.planning import plan_tasks_for_frames

from . import _fake_nvc
from ._nvdec_media import SPECS, make_media, random_frame_sets, record_of, reference_nv12


@pytest.fixture(scope="session")
def media(tmp_path_factory):
    return make_media(tmp_path_factory)

@pytest.fixture
def fake(monkeypatch):
    nvc = _fake_nvc.FakeNvc()
    _fake_nvc.install(monkeypatch, nvc)
    return nvc


def _collect(executor, task, *, bundle=None):
    got = {}

    def sink(i, frame):
        assert i not in got, f"frame {i} delivered twice"
        got[i] = _fake_nvc.as_numpy(frame.planes())

    if bundle is None:
        executor.decode(task, sink)
    else:
        executor.decode_bundle(task, bundle, sink)
    assert list(got) == sorted(got), "frames not delivered in ascending order"
    return got


def _check(executor, path, frames):
    record = record_of(path)
    task = plan_tasks_for_frames(0, record, frames)
    got = _collect(executor, task)
    ref = reference_nv12(path)
    assert sorted(got) == sorted(set(int(f) for f in frames))
    for i, nv12 in got.items():
        assert np.array_equal(nv12, ref[i]), f"{path.name}: frame {i} differs"


#: Every codec and surface format the NVDEC path takes (VP9 10-bit where PyAV can encode it).
CODEC_CASES = [(n, True) for n in ("h264", "hevc", "hevc_main10", "hevc_main12", "av1", "av1_10bit",
                                   "vp9", "vp9_10bit") if n in SPECS] + [("h264", False), ("hevc", False)]


@pytest.mark.parametrize("feed_packets", [16, 1])
@pytest.mark.parametrize(("name", "passthrough"), CODEC_CASES)
def test_random_frames_exact(media, monkeypatch, name, passthrough, feed_packets):
    """NV12 planes (8-bit) and P016 planes (10/12-bit: FFmpeg's samples shifted to the high
    bits) equal FFmpeg's full decode, for random frame sets of every codec, with H.264 and
    HEVC fed in chunks of access units (the default) and one access unit per call."""
    from vidloader.decoding.nvdec import _decoder

    nvc = _fake_nvc.FakeNvc(pts_passthrough=passthrough)
    _fake_nvc.install(monkeypatch, nvc)
    monkeypatch.setattr(_decoder, "FEED_PACKETS", feed_packets)
    chunked = feed_packets > 1 and record_of(media[name]).codec in _decoder.CHUNKED_CODECS
    ex = NvdecExecutor(frame_cache_bytes=0, packet_cache_bytes=0)
    for frames in random_frame_sets(record_of(media[name]).num_frames, count=10, seed=3):
        _check(ex, media[name], frames)
    slot = ex.slots[0]
    # Chunks map frames by count and never ask for the pts; one by one, the pts decides.
    assert slot.pts_mode == (None if chunked else "frame" if passthrough else "count")
    assert (nvc.chunks > 0) == chunked
    assert slot.reuse_after_flush is True and len(nvc.decoders) == 1
    assert all(flag == (2 if chunked else 2 | 8) for size, flag in nvc.packets if size)
    assert _fake_nvc._Stream.syncs > 0  # waits before a Decode that recycles delivered frames
    assert ex.stats.delivered == ex.stats.decoded - (ex.stats.decoded - ex.stats.delivered)
    assert ex.stats.decoded >= ex.stats.delivered > 0 and ex.stats.seeks > 0
    ex.close()


def test_to_rgb_uses_the_records_colors(media, fake):
    from vidloader.processing._nv12 import nv12_to_rgb

    record = record_of(media["h264"])
    ex = NvdecExecutor()
    out = {}
    ex.decode(plan_tasks_for_frames(0, record, [3]), lambda i, f: out.update(rgb=f.to_rgb((90, 160)), nv=f.planes()))
    ref = nv12_to_rgb(out["nv"], height=180, width=320, out_size=(90, 160))
    assert out["rgb"].shape == (90, 160, 3) and (out["rgb"] == ref).all()


def test_decoder_reused_across_sizes_and_codecs(media, fake):
    ex = NvdecExecutor(frame_cache_bytes=0, packet_cache_bytes=0)
    for name in ["h264", "h264_small", "hevc", "h264", "h264_large", "h264_small"]:
        _check(ex, media[name], [0, 5, 11])
    created = [(d.codec, d.max_w, d.max_h) for d in fake.decoders]
    # one h264 decoder grown once for the larger video, one hevc decoder
    assert created == [("h264", 320, 180), ("hevc", 320, 180), ("h264", 480, 272)]
    assert fake.decoders[0].reconfigs == [(192, 108), (320, 180)]
    assert fake.decoders[2].reconfigs == [(192, 108)]


def test_max_size_avoids_recreation(media, fake):
    ex = NvdecExecutor(max_width=640, max_height=360, frame_cache_bytes=0)
    for name in ["h264_small", "h264_large", "h264"]:
        _check(ex, media[name], [1, 9])
    assert len(fake.decoders) == 1


def test_flushed_decoder_that_ignores_packets_is_recreated(media, monkeypatch):
    nvc = _fake_nvc.FakeNvc(broken_reuse=True)
    _fake_nvc.install(monkeypatch, nvc)
    ex = NvdecExecutor(frame_cache_bytes=0, packet_cache_bytes=0)
    _check(ex, media["h264"], [2, 20, 40, 41])
    assert ex.slots[0].reuse_after_flush is False
    assert len(nvc.decoders) == 3  # one per GOP (3 GOPs) once the reuse was found broken


def test_frame_cache_serves_repeats_without_decoding(media, fake):
    ex = NvdecExecutor(frame_cache_bytes=64 << 20, packet_cache_bytes=0)
    _check(ex, media["h264"], [13, 16])
    decoded = ex.stats.decoded
    _check(ex, media["h264"], [12, 14, 16])  # all decoded for the first request (refs)
    assert ex.stats.decoded == decoded
    _check(ex, media["h264"], [12, 22])  # 22 was not decoded: the GOP is decoded again
    assert ex.stats.decoded > decoded


def test_packet_cache_demuxes_whole_gops_once(media, fake, monkeypatch):
    import vidloader.decoding.nvdec._executor as nvdec_mod

    calls = []
    real = nvdec_mod.demux_gops
    monkeypatch.setattr(nvdec_mod, "demux_gops", lambda *a, **k: calls.append(a[1]) or real(*a, **k))
    ex = NvdecExecutor(frame_cache_bytes=0, packet_cache_bytes=16 << 20)
    _check(ex, media["hevc"], [13])
    _check(ex, media["hevc"], [20, 23])
    assert len(calls) == 1 and len(ex.packet_cache) == 1
    # but only the packets frame 13 needs were fed the first time
    assert ex.stats.packets < 12 + 12


@pytest.mark.parametrize("cache", [0, 64 << 20])
def test_pool_matches_inline(media, fake, cache):
    ex = NvdecExecutor(num_decoders=3, frame_cache_bytes=cache, packet_cache_bytes=cache)
    wanted = [("h264", [1, 15, 30, 63]), ("hevc", [0, 40]), ("h264_small", [7, 8, 39]), ("h264", [2, 15, 16])]
    tasks = [plan_tasks_for_frames(k, record_of(media[n]), f) for k, (n, f) in enumerate(wanted)]
    got = []
    ex.decode_batch(tasks, lambda pos, i, f: got.append((pos, i, _fake_nvc.as_numpy(f.planes()))))
    assert [(p, i) for p, i, _ in got] == [(t.video_index, int(i)) for t in tasks for i in t.frames]
    for pos, i, nv12 in got:
        assert np.array_equal(nv12, reference_nv12(media[wanted[pos][0]])[i])
    assert 1 <= len(ex.slots) <= 3
    ex.close()


@pytest.mark.parametrize("name", ["hevc", "hevc_main10", "av1", "vp9"])
def test_separation_mode_decodes_given_bundles(media, fake, monkeypatch, name):
    import vidloader.decoding.nvdec._executor as nvdec_mod

    record = record_of(media[name])
    frames = [f for f in (5, 17, 18, 30, 35, 50) if f < record.num_frames]
    task = plan_tasks_for_frames(0, record, frames)
    bundle = demux_gops(record, task.gops)  # as a CPU worker would
    monkeypatch.setattr(nvdec_mod, "demux_gops", lambda *a, **k: pytest.fail("demuxed again"))
    ex = NvdecExecutor(packet_cache_bytes=16 << 20)
    got = _collect(ex, task, bundle=bundle)
    ref = reference_nv12(media[name])
    assert sorted(got) == frames and all(np.array_equal(v, ref[i]) for i, v in got.items())
    assert len(ex.packet_cache) == 0  # given packets are not copied into a cache nobody reads
    other = plan_tasks_for_frames(0, record, [5, 20])
    with pytest.raises(CorruptVideoError, match="does not match"):
        ex.decode_bundle(other, bundle, lambda i, f: None)


@pytest.mark.parametrize(("name", "message"), [
    ("h264_high10", r"h264_high10.mp4: H.264 High 10 \(10-bit 4:2:0\): NVDEC cannot decode H.264 above 8 bits"),
    ("hevc_10bit", r"hevc_10bit.mp4: HEVC Main 10 \(10-bit 4:2:0\) 128×96 is below NVDEC's minimum 144×144"),
    ("hevc_tiny", r"hevc_tiny.mp4: HEVC Main \(8-bit 4:2:0\) 128×96 is below NVDEC's minimum 144×144"),
])
def test_unsupported_inputs_are_refused_naming_codec_and_profile(media, fake, name, message):
    ex = NvdecExecutor()
    with pytest.raises(UnsupportedCodecError, match=message + "; use backend='cpu'"):
        ex.decode(plan_tasks_for_frames(0, record_of(media[name]), [0]), lambda i, f: None)
    assert not fake.decoders  # refused before any decoder or packet


def test_decoders_per_codec_and_surface_format(media, fake):
    """8-bit and 10/12-bit video of one codec never share a decoder (NV12 vs P016 surfaces);
    P016 planes come out uint16."""
    ex = NvdecExecutor(frame_cache_bytes=0, packet_cache_bytes=0)
    for name in ["hevc", "hevc_main10", "hevc", "hevc_main12", "av1_10bit", "av1"]:
        _check(ex, media[name], [0, 7])
    assert [d.codec for d in fake.decoders] == ["hevc", "hevc", "libdav1d", "libdav1d"]
    got = {}
    ex.decode(plan_tasks_for_frames(0, record_of(media["hevc_main10"]), [3]), lambda i, f: got.update(p=f.planes()))
    assert got["p"].dtype == torch.uint16 and int(got["p"].view(torch.int16).bitwise_and(63).abs().sum()) == 0


def test_caps_asked_per_kind_of_video_and_table_when_the_driver_cannot_say(media, monkeypatch):
    nvc = _fake_nvc.FakeNvc()
    _fake_nvc.install(monkeypatch, nvc)
    ex = NvdecExecutor(frame_cache_bytes=0)
    _check(ex, media["hevc_main10"], [1])
    _check(ex, media["hevc_main10"], [2])
    assert sorted(nvc.caps_calls) == [(8, 1, 8), (8, 1, 10)]  # asked once, with chroma and depth
    assert ex.caps.source == "driver" and ex.caps.engines == 7

    def broken(**kwargs):
        raise RuntimeError("no caps here")

    nvc2 = _fake_nvc.FakeNvc()
    nvc2.GetDecoderCaps = broken
    _fake_nvc.install(monkeypatch, nvc2)
    ex2 = NvdecExecutor(frame_cache_bytes=0)
    _check(ex2, media["vp9"], [4])
    assert ex2.caps.source == "table:turing"  # (9, 0): Hopper's NVDEC is Turing's


def test_other_codecs_are_refused_by_name_never_by_ffmpeg_library(media, fake):
    ex = NvdecExecutor()
    mpeg4 = dataclasses.replace(record_of(media["h264"]), codec="mpeg4", profile="Simple Profile")
    with pytest.raises(UnsupportedCodecError, match=r"MPEG-4 Part 2 Simple Profile \(8-bit 4:2:0\): "
                       r"vidloader's NVDEC path decodes H.264, HEVC, AV1 and VP9 only") as err:
        ex.decode(plan_tasks_for_frames(0, mpeg4, [0]), lambda i, f: None)
    assert "lib" not in str(err.value).split(": ", 1)[1]


def test_sizes_outside_the_decoder_caps_are_refused(media, fake):
    ex = NvdecExecutor()
    task = plan_tasks_for_frames(0, record_of(media["hevc_tiny"]), [1])
    with pytest.raises(UnsupportedCodecError, match=r"hevc_tiny.mp4.*144"):
        ex.decode(task, lambda i, f: None)


def test_decode_failure_retried_once_then_typed(media, monkeypatch):
    nvc = _fake_nvc.FakeNvc(fail_decodes=1)
    _fake_nvc.install(monkeypatch, nvc)
    ex = NvdecExecutor(frame_cache_bytes=0)
    _check(ex, media["h264"], [3, 30])  # the first failure is retried on a fresh decoder
    assert len(nvc.decoders) == 2
    nvc.fail_decodes = 2
    with pytest.raises(CorruptVideoError, match=r"h264.mp4.*NVDEC failed"):
        ex.decode(plan_tasks_for_frames(0, record_of(media["h264"]), [40]), lambda i, f: None)
    _check(ex, media["h264"], [41])  # and the executor still works afterwards


def test_sink_error_leaves_no_half_fed_decoder(media, fake):
    ex = NvdecExecutor(frame_cache_bytes=0, packet_cache_bytes=0)
    record = record_of(media["h264"])

    def bad_sink(i, f):
        raise KeyError("sink failed")

    with pytest.raises(KeyError):
        ex.decode(plan_tasks_for_frames(0, record, [12, 13, 14]), bad_sink)
    _check(ex, media["h264"], [24, 30])  # a fresh decoder: no leftovers of the failed GOP


def test_no_gpu_is_a_clear_error(monkeypatch):

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(BackendUnavailableError, match="no CUDA GPU is visible"):
        NvdecExecutor()


@pytest.mark.parametrize("num_decoders", [1, 3])
@pytest.mark.parametrize("cache", [0, 64 << 20])
def test_submit_batch_delivers_every_wanted_frame_once_per_gop(media, fake, num_decoders, cache):
    ex = NvdecExecutor(num_decoders=num_decoders, frame_cache_bytes=cache, packet_cache_bytes=cache)
    wanted = [("h264", [1, 15, 30, 63]), ("hevc", [0, 40]), ("h264_small", [7, 8, 39]), ("h264", [2, 15, 16])]
    tasks = [plan_tasks_for_frames(k, record_of(media[n]), f) for k, (n, f) in enumerate(wanted)]
    for _ in range(2):  # the second round hits the frame cache when it is on
        got, calls = {}, []

        def sink(pos, indices, frames):
            assert indices == sorted(indices) and len(frames) == len(indices)
            calls.append((pos, tuple(indices)))
            for k, i in enumerate(indices):
                assert (pos, i) not in got, "frame delivered twice"
                got[(pos, i)] = _fake_nvc.as_numpy(frames.nv12[k])

        ex.submit_batch(tasks, sink).wait()
        assert sorted(got) == sorted((t.video_index, int(i)) for t in tasks for i in t.frames)
        for (pos, i), nv12 in got.items():
            assert np.array_equal(nv12[: nv12.shape[0], : record_of(media[wanted[pos][0]]).width],
                                  reference_nv12(media[wanted[pos][0]])[i])
        # one call per GOP: the frames of a GOP come together
        assert len(calls) == sum(len(t.gops) for t in tasks)
    assert ex.stats.delivered == 2 * sum(len(f) for _, f in wanted)
    assert ex.stats.tasks == 2 * len(tasks)
    if cache:
        assert ex.frame_cache.hits > 0
    ex.close()


def test_submit_batch_copies_each_frame_once_into_its_row(media, fake, monkeypatch):
    """The batch path copies each wanted frame straight from the decoder's surface into its
    row of the GOP's stacked tensor: no private copy per frame stacked by a second copy (every
    delivered frame existed twice at once: 1.5 GiB at peak on the H100, session9-1)."""
    from vidloader.decoding.nvdec import _executor

    def twice(*args, **kwargs):
        raise AssertionError("a frame copied twice on the batch path")
    monkeypatch.setattr(_executor, "stack_surfaces", twice)
    monkeypatch.setattr(_executor, "_compact", twice)
    ex = NvdecExecutor(num_decoders=2, frame_cache_bytes=0, packet_cache_bytes=0)
    wanted = [("h264", [1, 15, 30, 31, 63]), ("hevc", [0, 40])]
    tasks = [plan_tasks_for_frames(k, record_of(media[n]), f) for k, (n, f) in enumerate(wanted)]
    got = {}

    def sink(pos, indices, frames):
        storage = frames.nv12.untyped_storage().data_ptr()
        for k, i in enumerate(indices):
            assert frames.nv12[k].untyped_storage().data_ptr() == storage  # rows of one tensor
            got[(pos, i)] = _fake_nvc.as_numpy(frames.nv12[k]).copy()

    ex.submit_batch(tasks, sink).wait()
    assert sorted(got) == sorted((t.video_index, int(i)) for t in tasks for i in t.frames)
    for (pos, i), nv12 in got.items():
        name = wanted[pos][0]
        assert np.array_equal(nv12[:, : record_of(media[name]).width], reference_nv12(media[name])[i])
    ex.close()


def test_submit_batch_error_surfaces_at_wait_and_cancels(media, fake):
    ex = NvdecExecutor(num_decoders=2, frame_cache_bytes=0, packet_cache_bytes=0)
    tasks = [plan_tasks_for_frames(k, record_of(media["h264"]), [k, 40 + k]) for k in range(4)]

    def sink(pos, indices, frames):
        if pos == 1:
            raise CorruptVideoError("x.mp4", "boom")

    pending = ex.submit_batch(tasks, sink)
    with pytest.raises(CorruptVideoError, match="boom"):
        pending.wait()
    ex.close()


def test_a_failed_batch_keeps_no_frame_of_any_failed_gop(media, fake):
    """Several GOPs fail at once (out of GPU memory on two decoder threads): besides the error
    raised, whose frames the loader clears, the batch must not keep the others' tracebacks,
    whose frames hold the sink and its staging views (on the H100 a 19 MiB slot outlived the
    error that way, session9-11)."""
    import gc
    import time
    import weakref

    from vidloader import GpuMemoryError

    ex = NvdecExecutor(num_decoders=2, frame_cache_bytes=0, packet_cache_bytes=0)
    tasks = [plan_tasks_for_frames(k, record_of(media["h264"]), [k, 40 + k]) for k in range(4)]
    held = []

    def sink(pos, indices, frames):
        staging = torch.zeros(16)  # stands in for the staging views a sink's frame holds
        held.append(weakref.ref(staging))
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 MiB")

    pending = ex.submit_batch(tasks, sink)
    with pytest.raises(GpuMemoryError) as caught:
        pending.wait()
    assert len(held) >= 2  # more than one GOP failed
    from vidloader.decoding._memory import release_frames
    release_frames(caught.value)  # what the loader does with the error it raises
    gc.collect()
    assert [ref() for ref in held if ref() is not None] == []  # `pending` still alive
    # A unit still in flight when the loader shuts down is cancelled, never waited for: its
    # failed GOPs go too (on the H100 this was the slot left alive, session9-12/13).
    held.clear()
    in_flight = ex.submit_batch(tasks, sink)
    deadline = time.monotonic() + 30
    while not in_flight.done() and time.monotonic() < deadline:  # its GOPs have failed
        time.sleep(0.01)
    in_flight.cancel()
    gc.collect()
    assert held and [ref() for ref in held if ref() is not None] == []
    ex.close()


def test_a_unit_failed_in_its_conversion_keeps_no_staging_buffer(media, fake, monkeypatch):
    """Out of GPU memory in a GOP sink's conversion: the error raised (kept by the caller,
    as ``pytest.raises`` and logs do) must not keep the unit's staging buffers. Its traceback
    keeps the sink's frame; clearing the frame drops its locals but not its function, whose
    closure held the unit's staging list (the H100's fault test, session 10 call 1: two
    32-row 448² slots left after the loader closed)."""
    import gc
    import weakref

    from vidloader import GpuMemoryError, Process, RandomFrames
    from vidloader.decoding._memory import release_frames
    from vidloader.decoding.nvdec._frame import NvdecFrames
    from vidloader.index import VideoIndex
    from vidloader.pipeline._assemble import BatchAssembler

    def out_of_memory(self, *args, **kwargs):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 MiB")

    monkeypatch.setattr(NvdecFrames, "to_rgb", out_of_memory)
    ex = NvdecExecutor(num_decoders=2, frame_cache_bytes=0, packet_cache_bytes=0)
    index = VideoIndex([record_of(media["h264"])])
    asm = BatchAssembler(index, {"a": Process(size=(48, 64))}, ex)
    plan = RandomFrames(seed=5).plan_epoch(index, epoch=0, batch_size=6)
    staging = {"a": torch.zeros(6, 1, 48, 64, 3, dtype=torch.uint8)}
    alive = weakref.ref(staging["a"])
    unit = asm.start_unit([plan.batch(0)], [staging])
    del staging
    with pytest.raises(GpuMemoryError) as caught:
        unit.finish()
    release_frames(caught.value)  # what the loader does with the error it raises
    del unit
    gc.collect()
    assert caught.value is not None and alive() is None
    ex.close()


def _assembler_outputs(media, executor, *, batched: bool, units: int = 2, sampler=None,
                       length: int = 1, index_map=None):
    """Fill `units` units of RandomFrames batches (or ``sampler``'s, of ``length`` frames a
    sample) from the fake NVDEC into CPU staging."""

    from vidloader import Process, RandomFrames
    from vidloader.index import VideoIndex
    from vidloader.pipeline._assemble import BatchAssembler

    index = VideoIndex([record_of(media[n]) for n in ("h264", "h264", "hevc")])
    outputs = {"a": Process(size=(48, 64)),
               "b": Process(size=(32, 32), crop="random", random_flip=True, index_map=index_map)}
    ex = executor if batched else _PerFrameOnly(executor)
    asm = BatchAssembler(index, outputs, ex)
    plan = (sampler or RandomFrames(seed=5)).plan_epoch(index, epoch=0, batch_size=6)
    b_frames = length if index_map is None else max(index_map) + 1
    started, stagings = [], []
    for u in range(units):  # start every unit before finishing the first (as SeparationPool does)
        plans = [plan.batch(2 * u), plan.batch(2 * u + 1)]
        st = [{"a": torch.zeros(6, length, 48, 64, 3, dtype=torch.uint8),
               "b": torch.zeros(6, b_frames, 32, 32, 3, dtype=torch.uint8)} for _ in plans]
        started.append(asm.start_unit(plans, st))
        stagings.append(st)
    for unit in started:
        assert all(r.valid.all() for r in unit.finish())
    return stagings


class _PerFrameOnly:
    """An executor seen without its batched API, to compare against the per-frame path."""

    batch_api = "frames"
    name = "nvdec"

    def __init__(self, ex):
        self._ex = ex
        self.stats = ex.stats

    def decode_batch(self, *a, **k):
        return self._ex.decode_batch(*a, **k)

    def decode(self, *a, **k):
        return self._ex.decode(*a, **k)


def test_gop_sink_fills_the_same_batches_as_the_per_frame_sink(media, fake):
    ex = NvdecExecutor(num_decoders=3, frame_cache_bytes=0, packet_cache_bytes=0)
    batched = _assembler_outputs(media, ex, batched=True)
    per_frame = _assembler_outputs(media, ex, batched=False)
    for unit_b, unit_f in zip(batched, per_frame):
        for sb, sf in zip(unit_b, unit_f):
            for name in sb:
                assert sb[name].any()
                assert np.array_equal(sb[name].numpy(), sf[name].numpy()), name
    ex.close()


@pytest.mark.parametrize("index_map", [None, [3, 2, 1, 0], [0, 2, 1, -1], [0, 1, 3, 2]])
def test_gop_sink_writes_a_clips_cropped_frames_as_the_per_frame_sink(media, fake, index_map):
    """Clips of 4 frames with a random crop and flip: the GOP sink writes each clip's run of
    frames in one cropped copy (``copy_runs`` of a ``Windowed`` stack), frame by frame where ``index_map`` reverses
    or skips slots; the batches equal the per-frame sink's."""
    from vidloader import Clips

    ex = NvdecExecutor(num_decoders=2, frame_cache_bytes=0, packet_cache_bytes=0)
    kwargs = dict(sampler=Clips(sequence_length=4, stride=1, seed=3), length=4, index_map=index_map)
    batched = _assembler_outputs(media, ex, batched=True, **kwargs)
    per_frame = _assembler_outputs(media, ex, batched=False, **kwargs)
    for unit_b, unit_f in zip(batched, per_frame):
        for sb, sf in zip(unit_b, unit_f):
            assert sb["b"].any()
            for name in sb:
                assert np.array_equal(sb[name].numpy(), sf[name].numpy()), name
    ex.close()


def test_windowed_runs_crop_a_run_of_frames_once():
    from vidloader.pipeline._assemble import Windowed, copy_runs
    from vidloader.processing import SampleTransform, apply_window
    from vidloader.processing._geometry import Geometry

    src = torch.arange(6 * 8 * 10 * 3, dtype=torch.int32).reshape(6, 8, 10, 3)
    geom = Geometry(decode_hw=(8, 10), out_hw=(4, 5))
    tf = SampleTransform(top=2, left=3, flip=True)
    cols, ks = [0, 1, 2, 5, 4], [0, 1, 2, 3, 5]  # a run of 3, then two single frames
    dst = torch.zeros(2, 6, 4, 5, 3, dtype=torch.int32).as_subclass(_NoListIndex)
    copy_runs(dst, [1] * len(cols), cols, Windowed(src, geom, tf), ks)
    expected = torch.zeros(2, 6, 4, 5, 3, dtype=torch.int32)
    for c, k in zip(cols, ks):
        expected[1, c] = apply_window(src[k], geom, tf)
    assert torch.equal(dst.as_subclass(torch.Tensor), expected)


@pytest.mark.parametrize("gops_per_part", [64, 1])
def test_separation_pool_decodes_units_asynchronously_and_exactly(media, fake, monkeypatch, gops_per_part):
    """SeparationPool (spawned demux workers, fake NVDEC here) queues several units on the
    decoder threads before waiting for the first, and splits a unit of many GOPs over
    several demux workers; the batches equal a synchronous fill."""

    import vidloader.pipeline._pool as pool_mod

    monkeypatch.setattr(pool_mod, "DEMUX_GOPS_PER_PART", gops_per_part)

    from vidloader import Process, RandomFrames
    from vidloader.index import VideoIndex
    from vidloader.pipeline._assemble import BatchAssembler
    from vidloader.pipeline._config import LoaderConfig
    from vidloader.pipeline._messages import FillTask, RowsFilled
    from vidloader.pipeline._pool import SeparationPool

    index = VideoIndex([record_of(media[n]) for n in ("h264", "hevc", "h264_small")])
    outputs = {"x": Process(size=(40, 40), crop="random")}
    shapes = {"x": (5, 1, 40, 40, 3)}
    plan = RandomFrames(seed=1).plan_epoch(index, epoch=0, batch_size=5)
    units = [[plan.batch(2 * u), plan.batch(2 * u + 1)] for u in range(4)]
    ex = NvdecExecutor(num_decoders=3, frame_cache_bytes=0, packet_cache_bytes=0)
    asm = BatchAssembler(index, outputs, ex)
    config = LoaderConfig(
        index=index, outputs=outputs, backend="nvdec", on_error="raise", batch_size=5,
        rows_per_sample=1, shapes=shapes, num_workers=2, prefetch=1, lookahead=None,
        persistent_workers=False, cpu_options={}, nvdec_options={"device": 0}, units_decoding=3,
        device=None, pin_memory=False,
    )
    pool = SeparationPool(config, asm, num_slots=8, device="cpu")
    try:
        for u, plans in enumerate(units):
            pool.submit(u % 2, FillTask([2 * u, 2 * u + 1], plans, [0, 0]))
        msgs = [pool.get() for _ in range(8)]
        assert sorted(m.batch_index for m in msgs if isinstance(m, RowsFilled)) == list(range(8)), msgs
        reference = NvdecExecutor(num_decoders=1, frame_cache_bytes=0, packet_cache_bytes=0)
        ref_asm = BatchAssembler(index, outputs, reference)
        for m in msgs:
            assert m.valid.all()
            want = {"x": torch.zeros(shapes["x"], dtype=torch.uint8)}
            ref_asm.fill(plan.batch(m.batch_index), want)
            assert np.array_equal(pool.slots[m.slot_id]["x"].numpy(), want["x"].numpy()), m.batch_index
        assert sum(m.stats["delivered"] for m in msgs) == 8 * 5
    finally:
        pool.shutdown()


def test_nvdec_loader_demux_workers_are_torch_free_and_leave_no_shared_memory(media, fake, monkeypatch):
    """backend="nvdec" with workers (separation mode, fake NVDEC): the demux workers map no
    libtorch (they come from the demux fork server), and neither a full epoch nor a break
    mid-epoch leaves a shared-memory segment behind, not even one a worker stopped mid-part
    would leave (named with the pool's prefix, removed at shutdown)."""
    import os

    import vidloader.pipeline._pool as pool_mod
    from vidloader import RandomFrames, VideoLoader
    from vidloader.index import VideoIndex
    from vidloader.pipeline._payloads import SharedPayloads

    from .test_loader import _shm_entries

    _fake_nvc.stage_on_cpu(monkeypatch)
    names = []  # the segments the loader received: named with its pool's prefix

    def unpack(light, segment, original=pool_mod.unpack_payloads):
        names.append(None if segment is None else segment.name)
        return original(light, segment)

    monkeypatch.setattr(pool_mod, "unpack_payloads", unpack)
    index = VideoIndex([record_of(media[n]) for n in ("h264", "hevc", "h264_small")])
    shm_before = _shm_entries()
    loader = VideoLoader(index, sampler=RandomFrames(seed=2), batch_size=6, size=(32, 32),
                         backend="nvdec", num_workers=2, device="cpu")
    it = iter(loader)
    next(it)
    pool = loader._pool
    workers = pool.procs
    assert len(workers) == 2
    for p in workers:
        with open(f"/proc/{p.pid}/maps") as f:
            assert "libtorch" not in f.read(), p.name
    delivered = 6 + sum(len(b["frames"]) for b in it)
    assert delivered == index.total_frames
    assert names and all(n.startswith(pool._segment_prefix) for n in names if n)
    it = iter(loader)
    for _ in range(2):  # then a break mid-epoch: packets may be in flight
        next(it)
    # What a worker stopped mid-part leaves: a segment named with its pool's prefix.
    left = SharedPayloads(prefix=loader._pool._segment_prefix)
    left.write(b"packets")
    it.close()
    loader.shutdown()
    assert not os.path.exists(f"/dev/shm/{left.name}")
    assert _shm_entries() <= shm_before, sorted(_shm_entries() - shm_before)
    assert not any(p.is_alive() for p in workers)


def test_demux_spans_cover_the_tasks_in_balanced_slices():
    from vidloader.pipeline._pool import DEMUX_GOPS_PER_PART, demux_spans

    class T:
        def __init__(self, n):
            self.gops = [0] * n

    tasks = [T(n) for n in (5, 40, 3, 30, 60, 2, 20, 10)]  # 170 GOPs
    assert len(demux_spans(tasks, 16)) == 170 // DEMUX_GOPS_PER_PART  # no part far under the size
    assert demux_spans(tasks[:1], 16) == [(0, 1)]  # a small unit stays with one worker
    for workers in (1, 2, 3, 16):
        spans = demux_spans(tasks, workers)
        assert spans[0][0] == 0 and spans[-1][1] == len(tasks)
        assert all(a < b for a, b in spans) and all(b == c for (_, b), (c, _) in zip(spans, spans[1:]))
        assert len(spans) <= max(1, min(workers, 170 // DEMUX_GOPS_PER_PART))
    many = [T(30) for _ in range(100)]  # 3000 GOPs: one part per worker, equal sizes
    spans = demux_spans(many, 8)
    assert len(spans) == 8 and {b - a for a, b in spans} <= {12, 13}
    assert demux_spans([], 4) == [(0, 0)]


def _bare_separation_pool(*, units_decoding: int, batch_rows: int):
    """A SeparationPool's unit ordering alone: no workers, no decoder."""
    import collections

    from vidloader.pipeline._pool import DemuxAhead, SeparationPool

    pool = object.__new__(SeparationPool)
    pool.units_decoding, pool._batch_rows = units_decoding, batch_rows
    pool.demux_ahead, pool.cpu_only = DemuxAhead(None), None
    pool._ready, pool._parts, pool._units = {}, {}, {}
    pool._decoding, pool._weights, pool._done = (collections.deque() for _ in range(3))
    return pool


def _run_units_as_fakes(pool, arrivals) -> list:
    """Make ``pool`` take its messages from ``arrivals`` and start each unit as a fake that
    finishes at once as ``("done", key)``, with every GPU staging buffer free (those:
    tests/test_memory_budget.py). Returns the list of ``(key, bundles)`` it starts, filled
    as it goes."""
    started = []

    class Unit:
        def __init__(self, key):
            self.key = key

        def finish(self):
            return [("done", self.key)]

    def start(key, bundles, failed):
        started.append((key, bundles))
        pool._decoding.append(Unit(key))

    pool._next_message = lambda deadline, block: arrivals.popleft() if arrivals else None
    pool._start = start
    pool._reserve = lambda key, block: True
    return started


def _task(*parts):
    """A FillTask of ``(batch_index, row_start, row_stop)`` parts (plans reduced to the
    fields the pool's counting reads)."""
    from types import SimpleNamespace

    from vidloader.pipeline._messages import FillTask

    plans = [SimpleNamespace(batch_index=b, batch_size=z - a) for b, a, z in parts]
    return FillTask([b for b, _, _ in parts], plans, [a for _, a, _ in parts])


def test_separation_pool_decodes_the_parts_of_one_batch_as_one_unit(monkeypatch):
    """The start-up ramp cuts the first batch into a unit per demux worker: those parts count
    as the one batch they fill against ``units_decoding``, so they all decode at once (counted
    as units, 16 of them decoded 8 at a time and the decoders idled, session11-2), while
    units of whole batches still count one each."""
    import collections

    import vidloader.pipeline._pool as pool_mod
    from vidloader.pipeline._messages import PacketsDemuxed

    monkeypatch.setattr(pool_mod, "unpack_payloads", lambda light, shared: light)
    pool = _bare_separation_pool(units_decoding=2, batch_rows=8)
    parts = {k: _task((0, 2 * k, 2 * k + 2)) for k in range(4)}  # batch 0 in four units
    whole = {4 + k: _task((1 + k, 0, 8)) for k in range(3)}  # batches 1, 2, 3
    pool._units = {key: (task, None) for key, task in (parts | whole).items()}
    pool._order = collections.deque(pool._units)
    pool._parts = {key: [None] for key in pool._units}
    arrivals = collections.deque(PacketsDemuxed(key, [key], [], 0, None) for key in pool._units)
    starts = _run_units_as_fakes(pool, arrivals)
    assert pool.get() == ("done", 0)
    started = [key for key, _ in starts]
    # the four parts (one batch) and batch 1 were decoding together: two batches' worth
    assert started[:5] == [0, 1, 2, 3, 4]
    assert len(started) == 5, started  # batch 2 waits: 3 parts + batch 1 still count 1.75
    got = [pool.get()[1] for _ in range(6)]
    assert got == [1, 2, 3, 4, 5, 6] and [key for key, _ in starts] == list(range(7))


def test_separation_pool_starts_units_in_submission_order_whatever_the_arrival_order(monkeypatch):
    """The loader takes batches in order: a unit whose packets arrive first but that was
    submitted later must not be decoded before the older ones (it would wait in its slots
    while the decoders idle once the older unit arrives; 18 s stalls on the H200)."""
    import collections

    import vidloader.pipeline._pool as pool_mod
    from vidloader.pipeline._messages import PacketsDemuxed

    monkeypatch.setattr(pool_mod, "unpack_payloads", lambda light, shared: light)
    pool = _bare_separation_pool(units_decoding=2, batch_rows=4)
    pool._order = collections.deque([0, 4, 8, 12])
    pool._units = {key: (_task((key, 0, 4)), None) for key in (0, 4, 8, 12)}  # whole batches
    for key in (0, 4, 8, 12):
        pool._parts[key] = [None, None] if key == 4 else [None]
    arrivals = collections.deque([  # unit 12 first, 4 in two parts around 8, 0 last
        PacketsDemuxed(12, ["b12"], [], 0, None), PacketsDemuxed(4, ["b4a"], [], 0, None),
        PacketsDemuxed(8, ["b8"], [], 0, None), PacketsDemuxed(4, ["b4b"], [], 1, None),
        PacketsDemuxed(0, ["b0"], [], 0, None),
    ])
    started = _run_units_as_fakes(pool, arrivals)
    got = [pool.get()[1] for _ in range(4)]
    assert got == [0, 4, 8, 12]
    assert started == [(0, ["b0"]), (4, ["b4a", "b4b"]), (8, ["b8"]), (12, ["b12"])]


def test_separation_pool_submits_a_unit_first_when_asked(monkeypatch):
    """``submit(..., first=True)`` (the combo's NVDEC taking over a CPU unit) puts the unit
    before every unit not started yet; a plain submit goes last."""
    import collections

    import vidloader.pipeline._pool as pool_mod

    pool = _bare_separation_pool(units_decoding=2, batch_rows=4)
    pool._keys, pool._order, pool.index = iter(range(10)), collections.deque(), None
    monkeypatch.setattr(pool_mod, "plan_tasks", lambda plans, index: [])
    monkeypatch.setattr(pool_mod, "demux_spans", lambda tasks, workers: [(0, 0)])
    monkeypatch.setattr(pool_mod.SeparationPool, "num_workers", 1, raising=False)
    monkeypatch.setattr(pool, "put", lambda worker, msg: None, raising=False)
    for batch, first in ((1, False), (2, False), (0, True), (3, False)):
        pool.submit(0, _task((batch, 0, 4)), first=first)
    assert list(pool._order) == [2, 0, 1, 3]


def test_demux_parts_cross_in_one_shared_memory_segment_and_the_cache_copies_out(media):
    """A demux part's payloads travel as one named shared-memory segment (mapped, not
    unpickled, by the GPU process, whose name is unlinked as it is mapped); the bundles come
    back byte-identical, the mapping goes when the last payload view does, and the packet
    cache stores compact copies, never views that would pin the part's whole segment."""
    import gc
    import os
    import pickle

    from vidloader.decoding._base import GopRequest
    from vidloader.decoding.nvdec._annexb import demux_gops, full_gop_requests
    from vidloader.decoding.nvdec._gop_cache import GopPacketCache
    from vidloader.pipeline._payloads import SharedPayloads, unpack_payloads

    def whole_gops(rec, count):
        keys = rec.keyframes[:count]
        return demux_gops(rec, full_gop_requests(rec, [GopRequest(int(k), np.array([int(k)])) for k in keys]))

    def mapped():
        with open("/proc/self/maps") as f:
            return segment.name in f.read()

    recs = [record_of(media[n]) for n in ("h264", "hevc")]
    bundles = [whole_gops(recs[0], 2), None, whole_gops(recs[1], 1)]
    segment, light = SharedPayloads().pack(list(bundles))
    assert segment.size == sum(b.payload.nbytes for b in bundles if b)
    assert os.path.exists(f"/dev/shm/{segment.name}") and not mapped()  # the writer unmapped
    assert len(pickle.dumps((segment, light))) < 0.1 * segment.size  # the bytes are not in the message
    back = unpack_payloads(light, segment)
    assert not os.path.exists(f"/dev/shm/{segment.name}") and mapped()  # unlinked once mapped
    assert back[1] is None
    for a, b in ((bundles[0], back[0]), (bundles[2], back[2])):
        assert np.array_equal(a.payload, b.payload) and np.array_equal(a.offsets, b.offsets)
        assert b.payload.base is not None  # a view of the segment
    cache = GopPacketCache(1 << 30)
    cache.put(back[2])
    cached = cache.get(back[2].path, int(back[2].gop_keyframes[0]), int(back[2].gop_last[0]))
    assert cached is not None and cached.payload.base is None
    assert np.array_equal(cached.payload, bundles[2].payload)
    del back, a, b
    gc.collect()
    assert not mapped()  # the last view gone, the pages go back (the cache holds a copy)


def test_a_demux_part_without_payload_bytes_sends_no_segment():
    from vidloader.pipeline._payloads import SharedPayloads, unpack_payloads

    segment, light = SharedPayloads().pack([None, None])
    assert segment is None and unpack_payloads(light, segment) == [None, None]


class _NoListIndex(torch.Tensor):
    """A tensor that fails on list (advanced) indexing: what ``copy_runs`` must never use."""

    def __setitem__(self, key, value):
        parts = key if isinstance(key, tuple) else (key,)
        assert not any(isinstance(k, (list, torch.Tensor)) for k in parts), key
        return super().__setitem__(key, value)


@pytest.mark.parametrize("shape", ["stream", "clips", "dealt", "mixed"])
def test_copy_runs_writes_every_frame_with_slices(shape):
    rng = np.random.default_rng(3)
    src = torch.arange(12 * 2 * 3, dtype=torch.int32).reshape(12, 2, 3)
    if shape == "stream":  # a GOP's frames fill consecutive rows of one column
        rows, cols, ks = list(range(2, 14)), [0] * 12, list(range(12))
    elif shape == "clips":  # a clip's frames fill consecutive columns of one row
        rows, cols, ks = [1] * 6 + [4] * 6, list(range(6)) * 2, list(range(12))
    elif shape == "dealt":  # GopShuffle: each frame its own batch row
        rows, cols, ks = rng.permutation(16)[:12].tolist(), [0] * 12, list(range(12))
    else:
        rows, cols, ks = [0, 1, 2, 9, 9, 9, 5, 3, 4, 15, 14, 13], [0, 0, 0, 1, 2, 3, 0, 0, 0, 0, 0, 0], list(range(12))
    dst = torch.zeros(16, 6, 2, 3, dtype=torch.int32).as_subclass(_NoListIndex)
    copy_runs(dst, rows, cols, src, ks)
    expected = torch.zeros(16, 6, 2, 3, dtype=torch.int32)
    for r, c, k in zip(rows, cols, ks):
        expected[r, c] = src[k]
    assert torch.equal(dst.as_subclass(torch.Tensor), expected)


def test_gop_sink_turns_frames_upright(fake, tmp_path):
    """The NVDEC path (batched GOP sink, torch stacks) turns frames as the CPU path does: the
    upright output is the coded output turned counter-clockwise by the display rotation."""
    from vidloader import Process, SequentialFrames
    from vidloader.index import VideoIndex
    from vidloader.pipeline._assemble import BatchAssembler

    from .media import make_rotated_video

    index = VideoIndex([record_of(make_rotated_video(tmp_path / "r90.mp4", 90))])
    plan = SequentialFrames().plan_epoch(index, epoch=0, batch_size=5)
    out = {}
    for upright, size in ((True, (32, 24)), (False, (24, 32))):
        ex = NvdecExecutor(num_decoders=2, frame_cache_bytes=0, packet_cache_bytes=0)
        proc = Process(size=size, autorotate=upright)
        staging = {"x": torch.zeros(5, 1, *size, 3, dtype=torch.uint8)}
        asm = BatchAssembler(index, {"x": proc}, ex)
        assert asm.start_unit([plan.batch(0)], [staging]).finish()[0].valid.all()
        out[upright] = staging["x"][:, 0]
        ex.close()
    assert out[False].float().std() > 10  # real pictures, not zeros
    assert torch.equal(out[True], out[False].rot90(1, dims=(1, 2)))


def test_decoder_threads_and_streams_outlive_their_pool():
    """A pool's threads (and each one's CUDA stream) serve the next pool after close: new
    threads and streams per loader left a cuBLAS workspace each on the GPU for good (128 MiB
    per loader of 4 decoder threads on an H100). Jobs not started are cancelled at close."""
    import threading
    from types import SimpleNamespace

    from vidloader.decoding.nvdec._pool import DecoderPool

    def make_slot(stream=None):
        return SimpleNamespace(close=lambda: None, stream=stream)

    def ident(slot, containers):
        return threading.get_ident()

    first = DecoderPool(make_slot, 3)
    threads = set(first._threads)
    assert all(f.result(timeout=10) for f in [first.submit(ident) for _ in range(30)])
    first.close()
    assert not [t.name for t in threading.enumerate() if t.name.startswith("vidloader-nvdec")]
    second = DecoderPool(make_slot, 3)
    assert set(second._threads) == threads  # the same threads, with the same streams
    gate, started = threading.Event(), threading.Semaphore(0)

    def hold(slot, containers):
        started.release()
        return gate.wait(10)

    held = [second.submit(hold) for _ in range(3)]
    for _ in held:
        assert started.acquire(timeout=10)  # every thread is busy: the next job waits
    queued = second.submit(ident)
    closing = threading.Thread(target=second.close)
    closing.start()
    gate.set()
    closing.join(timeout=10)
    assert all(f.result() for f in held) and queued.cancelled()


def test_a_pool_dropped_without_close_lets_its_threads_go():
    """Threads hold only a weak reference to their pool: an executor dropped without
    ``close`` does not leave decoder threads serving nobody for the rest of the process."""
    import gc
    import threading
    import time
    from types import SimpleNamespace

    from vidloader.decoding.nvdec._pool import DecoderPool

    pool = DecoderPool(lambda stream=None: SimpleNamespace(close=lambda: None), 2)
    assert pool.submit(lambda s, c: 7).result(timeout=10) == 7
    del pool
    gc.collect()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(
            t.name.startswith("vidloader-nvdec") for t in threading.enumerate()):
        time.sleep(0.01)
    assert not [t.name for t in threading.enumerate() if t.name.startswith("vidloader-nvdec")]
