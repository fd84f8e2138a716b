"""Test media and reference decodes shared by the NV12, Annex B and NVDEC tests.

Videos are generated (never downloaded) once per session; references come from a full PyAV
decode, so "frame i" is checked against frame i of the whole file in display order.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np

from vidloader.index._probe import probe_video
from vidloader.synthetic import VideoSpec, make_dataset

from ._fake_nvc import surface_of

#: name -> spec. B-frames with pyramids (bframes=3) make decode order differ from display order.
SPECS = {
    "h264": VideoSpec(codec="h264", width=320, height=180, num_frames=64, gop=12, bframes=3, seed=1),
    "hevc": VideoSpec(codec="hevc", width=320, height=180, num_frames=64, gop=12, bframes=3, seed=2),
    "h264_small": VideoSpec(codec="h264", width=192, height=108, num_frames=40, gop=10, bframes=2, seed=3),
    "h264_large": VideoSpec(codec="h264", width=480, height=272, num_frames=30, gop=15, bframes=2, seed=4),
    "h264_gop2": VideoSpec(codec="h264", width=128, height=72, num_frames=24, gop=2, bframes=3, seed=5),
    "hevc_tiny": VideoSpec(codec="hevc", width=128, height=96, num_frames=8, gop=4, bframes=0, seed=7),
    "hevc_10bit": VideoSpec(codec="hevc", width=128, height=96, num_frames=12, gop=6, bframes=0,
                            pix_fmt="yuv420p10le", seed=6),
    # Sizes at or above NVDEC's minimum for the codec (HEVC 144x144, AV1/VP9 128x128).
    "hevc_main10": VideoSpec(codec="hevc", width=256, height=144, num_frames=36, gop=12, bframes=3,
                             pix_fmt="yuv420p10le", seed=8),
    "hevc_main12": VideoSpec(codec="hevc", width=256, height=144, num_frames=24, gop=12, bframes=2,
                             pix_fmt="yuv420p12le", seed=9),
    "av1": VideoSpec(codec="av1", width=192, height=128, num_frames=36, gop=12, seed=10),
    "av1_10bit": VideoSpec(codec="av1", width=192, height=128, num_frames=24, gop=12,
                           pix_fmt="yuv420p10le", seed=11),
    "vp9": VideoSpec(codec="vp9", width=192, height=128, num_frames=36, gop=12, seed=12),
    "h264_high10": VideoSpec(codec="h264", width=192, height=108, num_frames=12, gop=6, bframes=2,
                             pix_fmt="yuv420p10le", seed=13),
}

#: 10-bit VP9 where this PyAV's libvpx was built for high bit depths (PyAV 18's is not).
if "yuv420p10le" in {f.name for f in __import__("av").Codec("libvpx-vp9", "w").video_formats}:
    SPECS["vp9_10bit"] = VideoSpec(codec="vp9", width=192, height=128, num_frames=24, gop=12,
                                   pix_fmt="yuv420p10le", seed=14)


_MEDIA: dict[str, Path] = {}


def make_media(tmp_path_factory) -> dict[str, Path]:
    """Every video of :data:`SPECS`, generated in parallel once per test session (each test
    module wraps this in its own session fixture named ``media``)."""
    if not _MEDIA:
        root = tmp_path_factory.mktemp("nvdec_media")
        names = [f"{n}.mp4" for n in SPECS]
        paths = make_dataset(root, list(SPECS.values()), names=names, num_workers=len(SPECS))
        _MEDIA.update(zip(SPECS, paths))
    return _MEDIA


#: 1080p clips for the one-look checks (CPU executor vs the NVDEC conversion at 224x224).
HD_SPECS = {
    "h264_1080p": VideoSpec(codec="h264", width=1920, height=1080, num_frames=6, gop=6, bframes=2, seed=21),
    "hevc10_1080p": VideoSpec(codec="hevc", width=1920, height=1080, num_frames=4, gop=4, bframes=0,
                              pix_fmt="yuv420p10le", seed=22),
}


def make_hd_media(tmp_path_factory) -> dict[str, Path]:
    """1080p H.264 (B-frames) and HEVC Main 10, a few frames each (~10 s to encode)."""
    paths = make_dataset(tmp_path_factory.mktemp("hd"), list(HD_SPECS.values()),
                         names=[f"{n}.mp4" for n in HD_SPECS], num_workers=2)
    return dict(zip(HD_SPECS, paths))


@functools.cache
def record_of(path: Path):
    return probe_video(path)


@functools.cache
def reference_frames(path: Path) -> tuple:
    """Every frame of a full PyAV decode in display order, as ``av.VideoFrame``s."""
    import av

    with av.open(str(path)) as c:
        frames = sorted(c.decode(video=0), key=lambda f: f.pts)
    return tuple(frames)


@functools.cache
def reference_nv12(path: Path) -> tuple[np.ndarray, ...]:
    """What NVDEC outputs for every frame of a full FFmpeg decode, display order: NV12 (Y plane,
    then interleaved U/V rows) for 8-bit video, P016 (the same, uint16, samples in the high
    bits) for 10/12-bit."""
    return tuple(surface_of(f) for f in reference_frames(path))


def decode_bundle_cpu(bundle, g: int, codec: str) -> list[tuple[int, np.ndarray]]:
    """Decode GOP ``g`` of a bundle's raw packets with FFmpeg: ``[(pts, nv12 or p016), ...]``."""
    import av

    cc = av.CodecContext.create("libdav1d" if codec == "av1" else codec, "r")
    frames = []
    for i in bundle.packet_range(g):
        packet = av.Packet(bundle.packet(i).tobytes())
        packet.pts = int(bundle.pts[i])
        frames.extend(cc.decode(packet))
    frames.extend(cc.decode(None))
    return [(f.pts, surface_of(f)) for f in frames]


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return float("inf") if mse == 0 else float(10 * np.log10(255.0**2 / mse))


def random_frame_sets(num_frames: int, *, count: int, seed: int) -> list[np.ndarray]:
    """Random sorted unique frame sets, including the edge cases 0 and the last frame."""
    rng = np.random.default_rng(seed)
    sets = [np.array([0]), np.array([num_frames - 1]), np.arange(num_frames)]
    for _ in range(count):
        k = int(rng.integers(1, 12))
        sets.append(np.unique(rng.integers(0, num_frames, size=k)))
    return sets


class DemuxDataset:
    """A map-style dataset whose items are separation-mode bundles, demuxed in a worker.

    Item ``k``: ``(k, PacketBundle, worker pid, whether PyNvVideoCodec is imported there,
    whether CUDA is initialised there)``. Module-level so spawned workers can unpickle it.
    """

    def __init__(self, items) -> None:
        self.items = list(items)  # [(VideoRecord, gops), ...]

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, k: int):
        import os
        import sys

        from vidloader.decoding.nvdec._annexb import demux_gops

        record, gops = self.items[k]
        bundle = demux_gops(record, gops)
        torch = sys.modules.get("torch")
        cuda_init = bool(torch is not None and torch.cuda.is_initialized())
        return k, bundle, os.getpid(), "PyNvVideoCodec" in sys.modules, cuda_init
