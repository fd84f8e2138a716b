"""Non-reference packet flags (``vidloader.decoding.nvdec._nal``) and ``PacketBundle.is_nonref``.

The key property: leaving the flagged packets out of a decoder's input, except those whose
frames are wanted, changes no other output frame by a single bit. It is checked with FFmpeg on
the bundles' own Annex B packets, for H.264 (with and without B-pyramid) and HEVC (with
reference B-frames and with temporal sub-layers).
"""

from __future__ import annotations

import pickle
import time

import av
import numpy as np
import pytest

from vidloader.decoding._base import GopRequest
from vidloader.decoding.nvdec._annexb import demux_gops, full_gop_requests
from vidloader.decoding.nvdec._bundle import PacketBundle, concat_bundles
from vidloader.decoding.nvdec._nal import nal_header_positions, nonreference_flags
from vidloader.index._probe import probe_video
from vidloader.synthetic import VideoSpec, _Painter

GOP = 30
NUM_FRAMES = 60

#: name -> (encoder, encoder parameters). Closed GOPs of 30 frames, two per video.
ENCODINGS = {
    "h264_bf2": ("libx264", "bframes=2:b-pyramid=none"),  # every B-frame is non-reference
    "h264_pyramid": ("libx264", "bframes=3:b-pyramid=normal"),  # middle B-frames are references
    "hevc_bf3": ("libx265", "bframes=3:no-open-gop=1:log-level=error"),
    "hevc_pyramid": ("libx265", "bframes=4:b-pyramid=1:no-open-gop=1:log-level=error"),
    # TemporalId 0 for P, 1 for reference B (TSA_R), 2 for non-reference B (TSA_N)
    "hevc_layers": ("libx265", "bframes=3:b-pyramid=1:temporal-layers=3:no-open-gop=1:log-level=error"),
}
H264 = [n for n in ENCODINGS if n.startswith("h264")]
ALL = list(ENCODINGS)


def _encode(path, encoder: str, params: str, *, width=320, height=180, seed=11) -> None:
    painter = _Painter(VideoSpec(width=width, height=height, seed=seed))
    key = "x264-params" if encoder == "libx264" else "x265-params"
    with av.open(str(path), "w") as out:
        stream = out.add_stream(encoder, rate=30)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.options = {key: f"keyint={GOP}:min-keyint={GOP}:scenecut=0:{params}", "preset": "veryfast"}
        for i in range(NUM_FRAMES):
            frame = av.VideoFrame.from_ndarray(painter.frame(i), format="rgb24").reformat(format="yuv420p")
            frame.pts = i
            out.mux(stream.encode(frame))
        out.mux(stream.encode(None))


@pytest.fixture(scope="module")
def videos(tmp_path_factory):
    """name -> path, or the reason the video could not be made (encoder missing or too old)."""
    root = tmp_path_factory.mktemp("nal_media")
    out: dict[str, object] = {}
    for name, (encoder, params) in ENCODINGS.items():
        if encoder not in av.codecs_available:
            out[name] = f"PyAV's FFmpeg has no {encoder}"
            continue
        path = root / f"{name}.mp4"
        try:
            _encode(path, encoder, params)
        except av.FFmpegError as exc:
            out[name] = f"{encoder} refused {params!r}: {exc}"
            continue
        out[name] = path
    return out


def _record(videos, name):
    path = videos[name]
    if isinstance(path, str):
        pytest.skip(path)
    return probe_video(path)


def _whole_gops_bundle(record) -> PacketBundle:
    requests = [GopRequest(int(k), np.array([int(k)])) for k in record.keyframes]
    return demux_gops(record, full_gop_requests(record, requests))


def _decode(bundle: PacketBundle, positions, *, skip_frame: str | None = None) -> dict[int, np.ndarray]:
    """Feed the packets at ``positions`` to a fresh FFmpeg decoder, flush: ``{pts: yuv420p}``."""
    cc = av.CodecContext.create(bundle.codec, "r")
    if skip_frame is not None:
        cc.skip_frame = skip_frame
    frames = []
    for i in positions:
        packet = av.Packet(bundle.packet(int(i)).tobytes())
        packet.pts = int(bundle.pts[i])
        frames.extend(cc.decode(packet))
    frames.extend(cc.decode(None))
    out = {f.pts: f.to_ndarray(format="yuv420p") for f in frames}
    assert len(out) == len(frames), "a pts was output twice"
    return out


def _hevc_headers(bundle: PacketBundle, i: int) -> list[tuple[int, int]]:
    """(nal_unit_type, TemporalId) of the NAL units of packet ``i``."""
    data = bundle.packet(i)
    return [(int(data[h] >> 1 & 0x3F), int(data[h + 1] & 7) - 1) for h in nal_header_positions(data)]


# ------------------------------------------------------------------------------------------
# Against FFmpeg's own notion of non-reference pictures


@pytest.mark.parametrize("name", ALL)
def test_flags_match_ffmpeg_skip_nonref(videos, name):
    """Compare with the packets FFmpeg still outputs with ``skip_frame=NONREF``.

    FFmpeg's rule (FFmpeg 8, ``h264dec.c`` / ``hevcdec.c``): H.264 skips NAL units with
    ``nal_ref_idc == 0``, the same rule as ours. HEVC skips every ``*_N`` VCL NAL unit
    *whatever its TemporalId*; ours also requires the picture to sit on the highest sub-layer,
    since pictures of higher sub-layers may reference a lower ``*_N`` picture. So for HEVC
    FFmpeg's output must be the packets that are not all-``*_N``, and our flags must be the
    all-``*_N`` packets on the top sub-layer. x265 with ``temporal-layers`` ends the stream
    with a TSA_N picture on TemporalId 1 below the top (2): FFmpeg drops it, we keep it
    (:func:`test_dropping_unwanted_nonref_packets_is_bit_exact` is the ground truth there).
    """
    record = _record(videos, name)
    bundle = _whole_gops_bundle(record)
    flags = bundle.is_nonref
    assert flags.dtype == np.int64 and flags.shape == (bundle.num_packets,)
    assert set(np.unique(flags).tolist()) == {0, 1}
    assert not np.any(flags[bundle.is_key == 1]), "a keyframe was flagged"
    if record.codec == "hevc":
        vcl = [[(t, tid) for t, tid in _hevc_headers(bundle, i) if t < 32] for i in range(bundle.num_packets)]
        all_n = np.array([all(t < 16 and t % 2 == 0 for t, _ in nals) for nals in vcl])
        top = max(tid for nals in vcl for _, tid in nals)
        on_top = np.array([all(tid == top for _, tid in nals) for nals in vcl])
        assert np.array_equal(flags == 1, all_n & on_top)
        ffmpeg_drops = all_n
        if name == "hevc_layers":
            assert np.any(all_n & ~on_top), "x265 no longer makes a *_N picture below the top sub-layer"
    else:
        ffmpeg_drops = flags == 1
    for g in range(bundle.num_gops):
        r = np.arange(bundle.packet_range(g).start, bundle.packet_range(g).stop)
        kept_by_ffmpeg = set(_decode(bundle, r, skip_frame="NONREF"))
        assert kept_by_ffmpeg == set(bundle.pts[r][~ffmpeg_drops[r]].tolist())


def test_h264_without_pyramid_flags_exactly_the_b_frames(videos):
    """With ``b-pyramid=none`` x264 never references a B-frame: the flags are the B-frames."""
    record = _record(videos, "h264_bf2")
    bundle = _whole_gops_bundle(record)
    with av.open(str(record.path)) as c:
        b_pts = {f.pts for f in c.decode(video=0) if f.pict_type == av.video.frame.PictureType.B}
    assert b_pts and set(bundle.pts[bundle.is_nonref == 1].tolist()) == b_pts


# ------------------------------------------------------------------------------------------
# Bit-exactness: the proof that dropping is safe


def _wanted_sets(pts_display: np.ndarray, flagged_pts: set, seed: int) -> list[set]:
    """Wanted frames (as pts) of one GOP: edge cases plus random sets."""
    rng = np.random.default_rng(seed)
    flagged = sorted(flagged_pts)
    sets = [
        set(),  # only what the references need
        {int(pts_display[-1])},  # the last frame of the GOP
        {flagged[len(flagged) // 2]},  # one non-reference B-frame
        {flagged[0], flagged[-1], int(pts_display[0])},
        set(pts_display.tolist()),  # everything: nothing dropped
    ]
    for _ in range(6):
        k = int(rng.integers(1, 8))
        sets.append(set(rng.choice(pts_display, size=k).tolist()))
    sets.extend({p} for p in flagged)  # each non-reference frame alone
    return sets


def _check_drop(bundle: PacketBundle, g: int, wanted: set, full: dict) -> None:
    r = np.arange(bundle.packet_range(g).start, bundle.packet_range(g).stop)
    keep = r[(bundle.is_nonref[r] == 0) | np.isin(bundle.pts[r], list(wanted))]
    out = _decode(bundle, keep)
    assert set(out) == set(bundle.pts[keep].tolist()), "a dropped frame was output, or a kept one lost"
    assert wanted <= set(out)
    for pts, frame in out.items():
        assert np.array_equal(frame, full[pts]), f"frame pts {pts} differs from the full decode"


@pytest.mark.parametrize("name", ALL)
def test_dropping_unwanted_nonref_packets_is_bit_exact(videos, name):
    record = _record(videos, name)
    bundle = _whole_gops_bundle(record)
    ends = np.append(record.keyframes[1:], record.num_frames)
    for g, (k, end) in enumerate(zip(record.keyframes, ends)):
        r = bundle.packet_range(g)
        full = _decode(bundle, range(r.start, r.stop))
        display = record.pts[k:end]
        assert set(full) == set(display.tolist())
        flagged = set(bundle.pts[r.start : r.stop][bundle.is_nonref[r.start : r.stop] == 1].tolist())
        assert flagged
        for s, wanted in enumerate(_wanted_sets(display, flagged, seed=10 * g)):
            _check_drop(bundle, g, wanted, full)
            # The same with a bundle demuxed for exactly these frames (it ends at the last one).
            if wanted:
                frames = np.flatnonzero(np.isin(record.pts, list(wanted)))
                partial = demux_gops(record, [GopRequest(int(k), frames)])
                _check_drop(partial, 0, wanted, full)


def test_hevc_nonref_below_top_sub_layer_is_kept(videos):
    """A ``*_N`` picture below the highest sub-layer may be referenced from above: kept.

    x265 marks its TemporalId-1 B-frames TSA_R; rewriting them to TSA_N (legal: only the
    TemporalId-2 pictures reference them) gives a stream with ``*_N`` pictures on two
    sub-layers. Only the top ones are flagged, and dropping them is bit-exact. FFmpeg's
    ``skip_frame=NONREF`` ignores the TemporalId and drops both sub-layers.
    """
    record = _record(videos, "hevc_layers")
    base = _whole_gops_bundle(record).gop(0)
    payload = base.payload.copy()
    heads = nal_header_positions(payload)
    types, tids = payload[heads] >> 1 & 0x3F, (payload[heads + 1] & 7).astype(int) - 1
    assert np.any((types == 3) & (tids == 1)) and np.any((types == 2) & (tids == 2))
    assert np.all(tids[types == 3] == 1)
    payload[heads[types == 3]] = 2 << 1  # TSA_R -> TSA_N (nuh_layer_id 0)
    flags = nonreference_flags(payload, base.offsets, base.sizes, "hevc")
    bundle = PacketBundle(**{**{f: getattr(base, f) for f in base.__dataclass_fields__},
                             "payload": payload, "is_nonref": flags})
    top_layer = np.array([any(t < 32 and tid == 2 for t, tid in _hevc_headers(bundle, i))
                          for i in range(bundle.num_packets)])
    assert np.array_equal(flags == 1, top_layer)
    all_packets = range(bundle.num_packets)
    full = _decode(bundle, all_packets)
    for wanted in (set(), {int(bundle.pts[np.flatnonzero(flags)[0]])}):
        _check_drop(bundle, 0, wanted, full)
    any_n = [any(t < 16 and t % 2 == 0 for t, _ in _hevc_headers(bundle, i)) for i in all_packets]
    ffmpeg_kept = set(_decode(bundle, all_packets, skip_frame="NONREF"))
    assert ffmpeg_kept <= set(bundle.pts[~np.array(any_n)].tolist())
    assert ffmpeg_kept < set(bundle.pts[flags == 0].tolist())


# ------------------------------------------------------------------------------------------
# The NAL header rule on hand-made payloads


def _pack(packets: list[bytes]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    sizes = np.array([len(p) for p in packets], np.int64)
    offsets = np.concatenate([[0], np.cumsum(sizes[:-1])]).astype(np.int64)
    return np.frombuffer(b"".join(packets), np.uint8), offsets, sizes


def _h264_nal(nal_type: int, ref_idc: int, body: bytes = b"\x88\x84\x21\xa0", four=False) -> bytes:
    return (b"\x00\x00\x00\x01" if four else b"\x00\x00\x01") + bytes([ref_idc << 5 | nal_type]) + body


def _hevc_nal(nal_type: int, tid: int, layer: int = 0, body: bytes = b"\xaf\x12\x80") -> bytes:
    header = bytes([nal_type << 1 | layer >> 5, (layer & 31) << 3 | (tid + 1)])
    return b"\x00\x00\x00\x01" + header + body


def test_h264_header_rule():
    packets = [
        _h264_nal(7, 3, four=True) + _h264_nal(8, 3) + _h264_nal(5, 3),  # SPS PPS IDR: keep
        _h264_nal(1, 0, four=True),  # non-reference slice
        _h264_nal(1, 2),  # reference slice
        _h264_nal(6, 0) + _h264_nal(1, 0) + _h264_nal(1, 0, b"\x9a\x00\x00\x03\x01"),  # SEI + 2 slices
        _h264_nal(1, 0) + _h264_nal(1, 1),  # mixed (not conforming): keep
        _h264_nal(6, 0) + _h264_nal(9, 0),  # no slice: keep
        _h264_nal(1, 0) + _h264_nal(20, 0),  # MVC/SVC slice extension: keep
        _h264_nal(2, 0) + b"\x00\x00",  # data partition A, trailing zero bytes
        b"",  # empty packet
        _h264_nal(1, 0),
    ]
    payload, offsets, sizes = _pack(packets)
    expect = [0, 1, 0, 1, 0, 0, 0, 1, 0, 1]
    assert nonreference_flags(payload, offsets, sizes, "h264").tolist() == expect
    # Offsets need not be sorted.
    order = np.random.default_rng(0).permutation(len(packets))
    flags = nonreference_flags(payload, offsets[order], sizes[order], "h264")
    assert flags.tolist() == np.array(expect)[order].tolist()
    # Unknown codec, no start codes, nothing at all: nothing is flagged.
    assert not nonreference_flags(payload, offsets, sizes, "mpeg4").any()
    raw = np.frombuffer(b"\x12\x34" * 50, np.uint8)
    assert not nonreference_flags(raw, [0, 50], [50, 50], "h264").any()
    assert nonreference_flags(np.empty(0, np.uint8), [], [], "h264").shape == (0,)


def test_hevc_header_rule():
    vps_sps_pps = _hevc_nal(32, 0) + _hevc_nal(33, 0) + _hevc_nal(34, 0)
    packets = [
        vps_sps_pps + _hevc_nal(19, 0),  # IDR_W_RADL: keep
        _hevc_nal(0, 0),  # TRAIL_N below the top TemporalId (1): may be referenced: keep
        _hevc_nal(2, 1),  # TSA_N on the top sub-layer: drop
        _hevc_nal(1, 1),  # TRAIL_R: keep
        _hevc_nal(39, 0) + _hevc_nal(8, 1) + _hevc_nal(8, 1),  # SEI + RASL_N x2: drop
        _hevc_nal(4, 1) + _hevc_nal(5, 1),  # mixed: keep
        _hevc_nal(14, 1),  # RSV_VCL_N14: drop
        _hevc_nal(0, 1, layer=1),  # TRAIL_N of an enhancement layer: keep
        _hevc_nal(35, 0) + _hevc_nal(39, 0),  # AUD + SEI: no VCL, keep
        _hevc_nal(6, 1),  # RADL_N: drop
    ]
    payload, offsets, sizes = _pack(packets)
    assert nonreference_flags(payload, offsets, sizes, "hevc").tolist() == [0, 0, 1, 0, 1, 0, 1, 0, 0, 1]
    # Without the TemporalId-1 pictures, TemporalId 0 is the top: the TRAIL_N is dropped.
    keep = [0, 1, 8]
    payload, offsets, sizes = _pack([packets[i] for i in keep])
    assert nonreference_flags(payload, offsets, sizes, "hevc").tolist() == [0, 1, 0]


def test_nonreference_flags_is_fast():
    """A 1.5 MB GOP takes a few milliseconds at most (about 1 ms measured); bound kept loose."""
    rng = np.random.default_rng(1)
    packets = [_h264_nal(1, int(rng.integers(0, 3)), rng.bytes(50_000)) for _ in range(30)]
    payload, offsets, sizes = _pack(packets)
    assert payload.nbytes > 1_500_000
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        nonreference_flags(payload, offsets, sizes, "h264")
        times.append(time.perf_counter() - t0)
    assert min(times) < 0.05


# ------------------------------------------------------------------------------------------
# The field in PacketBundle


def test_is_nonref_survives_serialization_slicing_and_concat(videos):
    record = _record(videos, "h264_pyramid")
    bundle = _whole_gops_bundle(record)
    assert bundle.is_nonref.any()
    buf = bytearray(bundle.serialized_size())
    assert bundle.write_to(buf) == len(buf)
    for copy in (False, True):
        back = PacketBundle.read_from(buf, copy=copy)
        assert np.array_equal(back.is_nonref, bundle.is_nonref)
        assert np.array_equal(back.gop_id, bundle.gop_id) and np.array_equal(back.payload, bundle.payload)
    assert np.array_equal(pickle.loads(pickle.dumps(bundle)).is_nonref, bundle.is_nonref)
    old = bytearray(buf)
    old[4:8] = (1).to_bytes(4, "little")  # a version-1 bundle (no is_nonref) is refused
    with pytest.raises(ValueError, match="version"):
        PacketBundle.read_from(old)
    parts = [bundle.gop(g) for g in range(bundle.num_gops)]
    for g, part in enumerate(parts):
        r = bundle.packet_range(g)
        assert np.array_equal(part.is_nonref, bundle.is_nonref[r.start : r.stop])
        assert np.array_equal(part.is_nonref, nonreference_flags(part.payload, part.offsets, part.sizes, "h264"))
    joined = concat_bundles(parts)
    assert np.array_equal(joined.is_nonref, bundle.is_nonref)
    assert joined.nbytes == bundle.nbytes
    assert bundle.nbytes == bundle.payload.nbytes + 8 * (6 * bundle.num_packets + 2 * bundle.num_gops)
