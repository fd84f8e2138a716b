"""CPU tests of the NVDEC path's device-independent parts: NV12 → RGB conversion, Annex B
separation demux (checked by decoding the bundles with FFmpeg), packet bundles and the caches.

Tolerances, measured on synthetic content and stated here once:

* ``nv12_to_rgb`` without resize vs swscale's ``to_ndarray("rgb24")``: max |diff| <= 3 and
  mean <= 1.6. The mean is not < 1 because swscale's fast (non ``ACCURATE_RND``) table path
  sits ~1 code value *below* the exact BT.601 result on every channel (measured: -1.0, -1.5,
  -1.0); against the exact float64 formula ours is within 1 (rounding only).
* With resize vs swscale ``BILINEAR``: PSNR >= 30 dB (measured 35-45 dB); the filters differ.
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch

from vidloader.decoding._base import GopRequest
from vidloader.decoding.nvdec._annexb import ContainerCache, demux_gops, full_gop_requests
from vidloader.decoding.nvdec._bundle import PacketBundle, concat_bundles
from vidloader.decoding.nvdec._gop_cache import FrameCache, GopPacketCache
from vidloader.errors import ConfigError, UnsupportedCodecError, VideoNotFoundError
from vidloader.planning import plan_tasks_for_frames
from vidloader.processing._nv12 import (
    color_params,
    i420_to_nv12,
    nv12_to_rgb,
    nv12_to_rgb_batch,
    yuv_to_rgb_coefficients,
)

from ._nvdec_media import (
    decode_bundle_cpu,
    psnr,
    random_frame_sets,
    record_of,
    reference_frames,
    reference_nv12,
)

# ------------------------------------------------------------------------------------------
# NV12 -> RGB


def _frame_and_nv12(media, name="h264", i=5):
    frame = reference_frames(media[name])[i]
    return frame, torch.from_numpy(reference_nv12(media[name])[i])


def _exact_rgb(nv12: np.ndarray, h: int, w: int, matrix: str, full: bool) -> np.ndarray:
    """float64 reference: textbook matrix, chroma repeated over its 2x2 block."""
    y = nv12[:h].astype(np.float64)
    uv = nv12[h:].reshape(h // 2, w // 2, 2).astype(np.float64).repeat(2, 0).repeat(2, 1)
    a, b = yuv_to_rgb_coefficients(matrix, full)
    rgb = np.stack([y, uv[..., 0], uv[..., 1]], -1) @ a.double().numpy().T + b.double().numpy()
    return np.clip(np.round(rgb), 0, 255)


@pytest.mark.parametrize("name", ["h264", "hevc"])
def test_nv12_to_rgb_matches_swscale(media, name):
    for i in (0, 7, 30):
        frame, nv12 = _frame_and_nv12(media, name, i)
        ref = frame.to_ndarray(format="rgb24").astype(int)
        got = nv12_to_rgb(nv12, height=frame.height, width=frame.width).numpy().astype(int)
        diff = np.abs(got - ref)
        assert diff.max() <= 3 and diff.mean() <= 1.6, (diff.max(), diff.mean())


@pytest.mark.parametrize("matrix", ["bt601", "bt709", "bt2020"])
@pytest.mark.parametrize("full", [False, True])
def test_nv12_to_rgb_is_the_exact_formula(media, matrix, full):
    frame, nv12 = _frame_and_nv12(media)
    got = nv12_to_rgb(nv12, height=180, width=320, matrix=matrix, full_range=full).numpy()
    assert np.abs(got - _exact_rgb(nv12.numpy(), 180, 320, matrix, full)).max() <= 1


def test_nv12_to_rgb_bt709_matches_swscale(media):
    frame, nv12 = _frame_and_nv12(media)
    ref = frame.reformat(format="rgb24", src_colorspace="ITU709").to_ndarray().astype(int)
    got = nv12_to_rgb(nv12, height=180, width=320, matrix="bt709").numpy().astype(int)
    diff = np.abs(got - ref)
    assert diff.max() <= 3 and diff.mean() <= 1.6


@pytest.mark.parametrize("size", [(90, 160), (224, 224), (360, 640), (57, 101)])
def test_nv12_resize_close_to_swscale_bilinear(media, size):
    frame, nv12 = _frame_and_nv12(media)
    h, w = size
    ref = frame.reformat(w, h, format="rgb24", interpolation="BILINEAR").to_ndarray()
    got = nv12_to_rgb(nv12, height=180, width=320, out_size=size).numpy()
    assert got.shape == (h, w, 3)
    assert psnr(got, ref) >= 30.0


@pytest.mark.parametrize("crop", [(0, 0, 180, 320), (10, 20, 100, 150), (7, 13, 51, 77)])
def test_crop_without_resize_is_a_slice(media, crop):
    _, nv12 = _frame_and_nv12(media)
    full = nv12_to_rgb(nv12, height=180, width=320)
    t, left, h, w = crop
    got = nv12_to_rgb(nv12, height=180, width=320, crop=crop)
    assert torch.equal(got, full[t : t + h, left : left + w])


@pytest.mark.parametrize("crop", [(10, 20, 100, 150), (7, 13, 51, 77)])
def test_crop_then_resize(media, crop):
    _, nv12 = _frame_and_nv12(media)
    t, left, h, w = crop
    window = nv12_to_rgb(nv12, height=180, width=320)[t : t + h, left : left + w]
    ref = torch.nn.functional.interpolate(
        window.permute(2, 0, 1)[None].float(), size=(64, 96), mode="bilinear", antialias=True
    )[0].permute(1, 2, 0).round().clamp(0, 255).byte()
    got = nv12_to_rgb(nv12, height=180, width=320, crop=crop, out_size=(64, 96))
    assert psnr(got.numpy(), ref.numpy()) >= 35.0


def test_out_slot_pitch_and_batch(media):
    nv12s = [torch.from_numpy(a) for a in reference_nv12(media["h264"])[:4]]
    single = [nv12_to_rgb(x, height=180, width=320, out_size=(90, 160)) for x in nv12s]
    # A pitched surface (rows wider than the picture) converts the same.
    pitched = torch.full((270, 384), 77, dtype=torch.uint8)
    pitched[:, :320] = nv12s[0]
    assert torch.equal(nv12_to_rgb(pitched, height=180, width=320, out_size=(90, 160)), single[0])
    batch_out = torch.zeros(6, 90, 160, 3, dtype=torch.uint8)
    res = nv12_to_rgb_batch(nv12s, height=180, width=320, out_size=(90, 160), out=batch_out[1:5])
    assert res.data_ptr() == batch_out[1].data_ptr()
    assert torch.equal(batch_out[1:5], torch.stack(single))
    assert batch_out[0].sum() == 0 and batch_out[5].sum() == 0
    slot = torch.zeros(90, 160, 3, dtype=torch.uint8)
    assert nv12_to_rgb(nv12s[2], height=180, width=320, out_size=(90, 160), out=slot) is slot
    assert torch.equal(slot, single[2])


def test_nv12_errors():
    nv12 = torch.zeros(270, 320, dtype=torch.uint8)
    with pytest.raises(ConfigError):
        nv12_to_rgb(nv12.float(), height=180, width=320)
    with pytest.raises(ConfigError):
        nv12_to_rgb(nv12, height=240, width=320)
    with pytest.raises(ConfigError):
        nv12_to_rgb(nv12, height=180, width=320, crop=(100, 0, 100, 10))
    with pytest.raises(ConfigError):
        nv12_to_rgb(nv12, height=180, width=320, matrix="bt999")
    with pytest.raises(ConfigError):
        nv12_to_rgb(nv12, height=180, width=320, out=torch.zeros(10, 10, 3, dtype=torch.uint8))


def test_color_params_follow_ffmpeg_defaults():
    assert color_params("bt709", "tv") == ("bt709", False)
    assert color_params("unknown", "unknown") == ("bt601", False)
    assert color_params("bt470bg", "pc") == ("bt601", True)
    assert color_params("smpte170m", "tv") == ("bt601", False)
    assert color_params("unknown", "unknown", "yuvj420p") == ("bt601", True)
    assert color_params("bt2020nc", "tv") == ("bt2020", False)


def test_i420_to_nv12_layout():
    h, w = 4, 6
    y = np.arange(h * w, dtype=np.uint8).reshape(h, w)
    u = np.full((2, 3), 100, np.uint8)
    v = np.full((2, 3), 200, np.uint8)
    i420 = np.concatenate([y.ravel(), u.ravel(), v.ravel()]).reshape(h * 3 // 2, w)
    nv12 = i420_to_nv12(i420)
    assert np.array_equal(nv12[:h], y)
    assert np.array_equal(nv12[h:], np.tile([100, 200], (2, 3)))


# ------------------------------------------------------------------------------------------
# Annex B separation demux, checked by decoding the bundles with FFmpeg


def _check_bundle_decodes(path, gops, bundle):
    record = record_of(path)
    ref = reference_nv12(path)
    assert bundle.num_gops == len(gops)
    for g, gop in enumerate(gops):
        assert bundle.gop_keyframes[g] == gop.keyframe and bundle.gop_last[g] == gop.last
        r = bundle.packet_range(g)
        assert bundle.is_key[r.start] == 1 and bundle.pts[r.start] == record.pts[gop.keyframe]
        head = bundle.packet(r.start)[:4].tolist()
        assert head in ([0, 0, 0, 1], [0, 0, 1, bundle.packet(r.start)[3]])  # Annex B start code
        got = {int(np.searchsorted(record.pts, t)): a for t, a in decode_bundle_cpu(bundle, g, record.codec)}
        for i in gop.frames.tolist():
            assert i in got, f"frame {i} not decodable from the bundle"
            assert np.array_equal(got[i], ref[i]), f"frame {i} differs"


@pytest.mark.parametrize("name", ["h264", "hevc", "h264_gop2"])
def test_demux_gops_bundles_decode_every_wanted_frame(media, name):
    path, record = media[name], record_of(media[name])
    cache = ContainerCache(2)
    for frames in random_frame_sets(record.num_frames, count=12, seed=len(name)):
        task = plan_tasks_for_frames(0, record, frames)
        bundle = demux_gops(record, task.gops, container_cache=cache)
        _check_bundle_decodes(path, task.gops, bundle)
    assert len(cache) == 1
    cache.close()


class _OvershootingContainer:
    """Seeks land one GOP late, as a pts seek can where GOPs are shorter than the B delay."""

    def __init__(self, container, step):
        self._c, self._step = container, step

    def seek(self, offset, **kw):
        return self._c.seek(offset + self._step if offset >= 0 else offset, **kw)

    def __getattr__(self, name):
        return getattr(self._c, name)


def test_demux_recovers_when_a_seek_overshoots(media):
    path, record = media["h264"], record_of(media["h264"])
    cache = ContainerCache()
    video = cache.get(record)
    video.container = _OvershootingContainer(video.container, int(record.pts[12] - record.pts[0]))
    task = plan_tasks_for_frames(0, record, [13, 26, 50])
    _check_bundle_decodes(path, task.gops, demux_gops(record, task.gops, container_cache=cache))
    cache.close()


def test_demux_reads_only_what_the_frames_need(media):
    record = record_of(media["h264"])
    bundle = demux_gops(record, [GopRequest(12, np.array([12]))])
    # A keyframe alone needs only its own packet.
    assert bundle.num_packets == 1
    bundle = demux_gops(record, [GopRequest(12, np.array([13]))])
    # A B-frame needs the references decoded before it, but not the whole GOP.
    assert 2 <= bundle.num_packets < 12
    whole = demux_gops(record, full_gop_requests(record, [GopRequest(12, np.array([13]))]))
    assert whole.num_packets == 12 and whole.gop_last[0] == 23


def test_full_gop_requests_cover_each_gop(media):
    record = record_of(media["h264"])
    full = full_gop_requests(record, [GopRequest(0, np.array([3])), GopRequest(60, np.array([61]))])
    assert full[0].frames.tolist() == list(range(0, 12))
    assert full[1].frames.tolist() == list(range(60, 64))


def test_demux_errors(media, tmp_path):
    import dataclasses

    record = record_of(media["h264"])
    with pytest.raises(UnsupportedCodecError, match="mpeg4"):
        demux_gops(dataclasses.replace(record, codec="mpeg4"), [GopRequest(0, np.array([0]))])
    with pytest.raises(VideoNotFoundError):
        demux_gops(dataclasses.replace(record, path=str(tmp_path / "gone.mp4")), [GopRequest(0, np.array([0]))])


def _bundle(media):
    record = record_of(media["hevc"])
    task = plan_tasks_for_frames(0, record, [1, 14, 15, 40])
    return record, task, demux_gops(record, task.gops)


def _same(a: PacketBundle, b: PacketBundle) -> bool:
    fields = ("payload", "offsets", "sizes", "pts", "is_key", "is_nonref", "gop_id", "gop_keyframes",
              "gop_last")
    return a.path == b.path and a.codec == b.codec and all(
        np.array_equal(getattr(a, f), getattr(b, f)) for f in fields
    )


def test_bundle_shared_memory_layout_and_pickle(media):
    from multiprocessing import shared_memory

    _, _, bundle = _bundle(media)
    assert _same(pickle.loads(pickle.dumps(bundle)), bundle)
    shm = shared_memory.SharedMemory(create=True, size=bundle.serialized_size())
    try:
        assert bundle.write_to(shm.buf) == bundle.serialized_size()
        view = PacketBundle.read_from(shm.buf)
        assert _same(view, bundle)
        copy = PacketBundle.read_from(shm.buf, copy=True)
        del view
    finally:
        shm.close()
        shm.unlink()
    assert _same(copy, bundle)
    with pytest.raises(ValueError):
        bundle.write_to(bytearray(10))
    with pytest.raises(ValueError):
        PacketBundle.read_from(bytearray(200))


def test_bundle_gop_slices_and_concat(media):
    record, task, bundle = _bundle(media)
    parts = [bundle.gop(g) for g in range(bundle.num_gops)]
    for g, part in enumerate(parts):
        _check_bundle_decodes(media["hevc"], [task.gops[g]], part)
        assert part.payload.nbytes == int(bundle.sizes[bundle.packet_range(g)].sum())
    assert _same(concat_bundles(parts), bundle)


# ------------------------------------------------------------------------------------------
# Caches


def _fake_gop(path: str, keyframe: int, last: int, nbytes: int) -> PacketBundle:
    one = np.ones(1, np.int64)
    return PacketBundle(
        path, "h264", np.zeros(nbytes, np.uint8), 0 * one, nbytes * one, keyframe * one, one,
        0 * one, 0 * one, keyframe * one, last * one,
    )


def test_gop_packet_cache_lru_bounds_and_coverage():
    overhead = _fake_gop("a", 0, 0, 0).nbytes
    cache = GopPacketCache(max_bytes=3 * (1000 + overhead))
    for k in range(3):
        cache.put(_fake_gop("a", k * 10, k * 10 + 9, 1000))
    assert len(cache) == 3 and cache.nbytes <= cache.max_bytes
    assert cache.get("a", 0, 5) is not None  # 0 becomes most recent
    cache.put(_fake_gop("b", 0, 9, 1000))  # evicts the LRU: ("a", 10)
    assert ("a", 10) not in cache and ("a", 0) in cache and cache.nbytes <= cache.max_bytes
    assert cache.get("a", 20, 30) is None  # covers only up to 29
    cache.put(_fake_gop("a", 20, 25, 10))  # shorter coverage: keeps the longer one
    assert cache.get("a", 20, 29) is not None
    cache.put(_fake_gop("c", 0, 9, 10**6))  # larger than the cache: not stored
    assert ("c", 0) not in cache and len(cache) == 3
    assert cache.hits == 2 and cache.misses == 1
    off = GopPacketCache(0)
    off.put(_fake_gop("a", 0, 9, 10))
    assert len(off) == 0


def test_gop_packet_cache_splits_bundles(media):
    record, task, bundle = _bundle(media)
    cache = GopPacketCache(1 << 20)
    cache.put(bundle)
    assert len(cache) == bundle.num_gops
    for g, gop in enumerate(task.gops):
        hit = cache.get(record.path, gop.keyframe, gop.last)
        assert hit is not None and _same(hit, bundle.gop(g))


def test_frame_cache_bounds_and_lru():
    cache = FrameCache(max_bytes=3 * 600)
    frames = {i: torch.full((20, 30), i, dtype=torch.uint8) for i in range(5)}
    for i in range(3):
        assert cache.put("v", i, frames[i])
    assert cache.has_all("v", [0, 1, 2]) and not cache.has_all("v", [0, 3])
    assert torch.equal(cache.get("v", 0), frames[0])
    cache.put("v", 3, frames[3])  # evicts 1, the least recently used
    assert ("v", 1) not in cache and cache.nbytes == 1800
    assert cache.get("v", 1) is None
    assert not cache.put("v", 9, torch.zeros(100, 100, dtype=torch.uint8))
    cache.clear()
    assert len(cache) == 0 and cache.nbytes == 0
