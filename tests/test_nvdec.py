"""NVDEC executor on a real GPU (``cuda`` marker: skipped where no GPU/PyNvVideoCodec is).

Exactness: NVDEC's NV12 output is compared bit-exactly with FFmpeg's decode of the same
frames (Y plane and interleaved U/V). RGB: within the tolerance stated in ``test_nv12.py``
(max |diff| <= 3, mean <= 1.6 against swscale; resized: PSNR >= 30 dB).
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from vidloader.errors import UnsupportedCodecError
from vidloader.planning import plan_tasks_for_frames

from ._nvdec_media import (
    DemuxDataset,
    psnr,
    random_frame_sets,
    record_of,
    reference_frames,
    reference_nv12,
)

pytestmark = pytest.mark.cuda


def _executor(**kw):
    from vidloader.decoding.nvdec._executor import NvdecExecutor

    return NvdecExecutor(**kw)


def _decode_planes(ex, path, frames, *, video_index=0):
    task = plan_tasks_for_frames(video_index, record_of(path), frames)
    got = {}
    ex.decode(task, lambda i, f: got.__setitem__(i, f.planes()))
    torch.cuda.synchronize()
    assert list(got) == sorted(got)
    return {i: t.cpu().numpy() for i, t in got.items()}


def _assert_exact(path, got, frames):
    ref = reference_nv12(path)
    assert sorted(got) == sorted({int(f) for f in frames})
    for i, nv12 in got.items():
        assert nv12.shape == ref[i].shape, (i, nv12.shape, ref[i].shape)
        assert np.array_equal(nv12[: ref[i].shape[0] * 2 // 3], ref[i][: ref[i].shape[0] * 2 // 3]), f"{path.name}: Y of frame {i}"
        assert np.array_equal(nv12, ref[i]), f"{path.name}: UV of frame {i}"


@pytest.mark.parametrize("name", ["h264", "hevc"])
def test_planes_bit_exact_with_bframes(media, name):
    ex = _executor(frame_cache_bytes=0, packet_cache_bytes=0)
    frames = np.arange(record_of(media[name]).num_frames)
    _assert_exact(media[name], _decode_planes(ex, media[name], frames), frames)
    slot = ex.slots[0]
    print(f"\n[fact] {name}: pts_mode={slot.pts_mode} reuse_after_flush={slot.reuse_after_flush}")
    ex.close()


@pytest.mark.parametrize("num_decoders", [1, 4])
@pytest.mark.parametrize("name", ["h264", "hevc", "h264_gop2"])
def test_random_frame_sets_exact(media, name, num_decoders):
    ex = _executor(num_decoders=num_decoders, frame_cache_bytes=0, packet_cache_bytes=0)
    for frames in random_frame_sets(record_of(media[name]).num_frames, count=15, seed=7):
        _assert_exact(media[name], _decode_planes(ex, media[name], frames), frames)
    ex.close()


def test_caches_and_pool_batch_exact(media):
    ex = _executor(num_decoders=3, frame_cache_bytes=64 << 20, packet_cache_bytes=16 << 20)
    names = ["h264", "hevc", "h264_small", "h264"]
    rng = np.random.default_rng(0)
    for _ in range(4):
        tasks = [plan_tasks_for_frames(k, record_of(media[n]), rng.integers(0, record_of(media[n]).num_frames, 6))
                 for k, n in enumerate(names)]
        got = []
        ex.decode_batch(tasks, lambda pos, i, f: got.append((pos, i, f.planes())))
        torch.cuda.synchronize()
        assert [(p, i) for p, i, _ in got] == [(t.video_index, int(i)) for t in tasks for i in t.frames]
        for pos, i, nv12 in got:
            assert np.array_equal(nv12.cpu().numpy(), reference_nv12(media[names[pos]])[i])
    assert ex.frame_cache.hits > 0
    ex.close()


def test_rgb_within_tolerance_of_swscale(media):
    ex = _executor()
    path = media["h264"]
    task = plan_tasks_for_frames(0, record_of(path), [0, 13, 31])
    out = {}
    ex.decode(task, lambda i, f: out.__setitem__(i, (f.to_rgb(), f.to_rgb((90, 160)))))
    torch.cuda.synchronize()
    for i, (full, small) in out.items():
        assert full.is_cuda and full.dtype == torch.uint8 and full.shape == (180, 320, 3)
        frame = reference_frames(path)[i]
        diff = np.abs(full.cpu().numpy().astype(int) - frame.to_ndarray(format="rgb24").astype(int))
        assert diff.max() <= 3 and diff.mean() <= 1.6, (diff.max(), diff.mean())
        ref_small = frame.reformat(160, 90, format="rgb24", interpolation="BILINEAR").to_ndarray()
        assert psnr(small.cpu().numpy(), ref_small) >= 30.0


def test_decoder_reused_across_videos_of_different_sizes(media):
    ex = _executor(frame_cache_bytes=0, packet_cache_bytes=0)
    order = ["h264_small", "h264", "h264_small", "hevc", "h264", "h264_large", "h264_small", "h264"]
    for name in order:
        frames = [0, 5, 9, 17] if record_of(media[name]).num_frames > 17 else [0, 5, 9]
        _assert_exact(media[name], _decode_planes(ex, media[name], frames), frames)
    slot = ex.slots[0]
    # h264: created, grown for 320x180 and for 480x272; hevc: created once
    print(f"\n[fact] decoders created for {order}: {slot.recreated}; reuse_after_flush={slot.reuse_after_flush}")
    assert slot.recreated <= 4 or slot.reuse_after_flush is False
    ex.close()


def test_ten_bit_hevc_is_refused_naming_the_file(media):
    ex = _executor()
    task = plan_tasks_for_frames(0, record_of(media["hevc_10bit"]), [0, 3])
    with pytest.raises(UnsupportedCodecError, match="hevc_10bit.mp4"):
        ex.decode(task, lambda i, f: None)


def test_sizes_below_nvdec_minimum_are_refused_naming_the_file(media):
    ex = _executor()  # NVDEC's HEVC minimum is 144x144; this video is 128x96
    task = plan_tasks_for_frames(0, record_of(media["hevc_tiny"]), [0, 3])
    with pytest.raises(UnsupportedCodecError, match="hevc_tiny.mp4"):
        ex.decode(task, lambda i, f: None)


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_cpu_workers_demux_while_main_decodes_on_gpu(media, method):
    """Separation mode: DataLoader workers demux (CPU only) after the main process has
    initialised CUDA, run a model and created its decoder; no CUDA error, frames exact."""
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1)).cuda()
    model(torch.zeros(1, 3, 64, 64, device="cuda"))
    ex = _executor(frame_cache_bytes=0, packet_cache_bytes=0)
    ex.decode(plan_tasks_for_frames(0, record_of(media["h264"]), [0]), lambda i, f: None)
    rng = np.random.default_rng(1)
    names = ["h264", "hevc", "h264_small"] * 4
    tasks = [plan_tasks_for_frames(k, record_of(media[n]), rng.integers(0, record_of(media[n]).num_frames, 5))
             for k, n in enumerate(names)]
    loader = torch.utils.data.DataLoader(
        DemuxDataset([(t.record, t.gops) for t in tasks]), batch_size=None, num_workers=3,
        multiprocessing_context=method,
    )
    seen = 0
    for k, bundle, pid, nvc_in_worker, cuda_in_worker in loader:
        assert pid != os.getpid() and not cuda_in_worker
        if method == "spawn":
            assert not nvc_in_worker  # demuxing never imports PyNvVideoCodec
        frames = {}
        ex.decode_bundle(tasks[k], bundle, lambda i, f: frames.__setitem__(i, (f.planes(), f.to_rgb((64, 64)))))
        batch = torch.stack([rgb for _, rgb in frames.values()]).permute(0, 3, 1, 2).float() / 255
        assert model(batch).shape == (len(frames), 8, 1, 1)
        for i, (nv12, _) in frames.items():
            assert np.array_equal(nv12.cpu().numpy(), reference_nv12(media[names[k]])[i])
        seen += 1
    torch.cuda.synchronize()
    assert seen == len(tasks)
    ex.close()


@pytest.mark.parametrize("name", ["h264", "hevc"])
def test_skipping_nonref_packets_is_exact_and_feeds_fewer(media, name):
    """NVDEC fed without the unwanted non-reference pictures: the same wanted frames, bit for
    bit, from fewer packets."""
    sets = random_frame_sets(record_of(media[name]).num_frames, count=12, seed=11)
    fed = {}
    for skip in (True, False):
        ex = _executor(frame_cache_bytes=0, packet_cache_bytes=0, skip_nonref=skip)
        for frames in sets:
            _assert_exact(media[name], _decode_planes(ex, media[name], frames), frames)
        fed[skip] = ex.stats.packets
        ex.close()
    assert fed[True] < fed[False], fed


@pytest.mark.parametrize("num_decoders", [1, 4])
def test_submit_batch_gop_sink_exact(media, num_decoders):
    """The loader's path: one sink call per GOP on a decoder thread, frames stacked."""
    ex = _executor(num_decoders=num_decoders, frame_cache_bytes=32 << 20, packet_cache_bytes=0)
    names = ["h264", "hevc", "h264_small", "h264"]
    rng = np.random.default_rng(4)
    for _ in range(3):
        tasks = [plan_tasks_for_frames(k, record_of(media[n]), rng.integers(0, record_of(media[n]).num_frames, 7))
                 for k, n in enumerate(names)]
        got = {}

        def sink(pos, indices, frames):
            planes = frames.nv12.clone()  # on the decoder thread's stream
            for k, i in enumerate(indices):
                got[(pos, i)] = planes[k]

        ex.submit_batch(tasks, sink).wait()
        torch.cuda.synchronize()
        assert sorted(got) == sorted((t.video_index, int(i)) for t in tasks for i in t.frames)
        for (pos, i), nv12 in got.items():
            assert np.array_equal(nv12.cpu().numpy(), reference_nv12(media[names[pos]])[i]), (pos, i)
    ex.close()
