"""vidloader: fast, exact video frame and clip loading for PyTorch training.

Decode on CPU (FFmpeg through PyAV, resizing inside the decoder) or on NVIDIA GPUs (NVDEC
through PyNvVideoCodec). ``import vidloader`` never imports a GPU library, and imports each
public name's layer only on first use.

Typical use::

    import vidloader
    index = vidloader.build_index("videos/")
    loader = vidloader.VideoLoader(index, sampler=vidloader.RandomFrames(seed=0),
                                   batch_size=128, size=(224, 224), num_workers=8)
    for batch in loader:
        frames = batch["frames"]          # uint8 [128, 224, 224, 3]
"""

from ._utils._lazy import lazy_exports

#: Public name -> the subpackage that defines it. ``import vidloader`` imports none of them:
#: each is imported on first use (``vidloader.VideoLoader``, ``from vidloader import X``), so a
#: command that needs only the index (``vidloader info``) never imports torch.
_HOMES = {
    "decode_frames": ".decoding",
    **dict.fromkeys([
        "BackendUnavailableError", "ConfigError", "CorruptImageError", "CorruptVideoError",
        "DatasetFormatError", "FrameIndexError", "GpuMemoryError", "IndexFormatError", "MediaError",
        "PathOutsideRootError", "StaleIndexError", "UnsupportedCodecError", "VideoNotFoundError",
        "VidloaderError", "WorkerError",
    ], ".errors"),
    **dict.fromkeys(["VideoIndex", "VideoRecord", "build_index", "probe_video"], ".index"),
    "ImageLoader": ".pipeline",
    "VideoLoader": ".pipeline",
    "Process": ".processing",
    **dict.fromkeys([
        "Clips", "GopShuffle", "MultiCameraClips", "RandomFrames", "Sampler", "SequentialFrames",
    ], ".sampling"),
}

__version__ = "0.1.0"

__all__ = [
    "BackendUnavailableError",
    "Clips",
    "ConfigError",
    "CorruptImageError",
    "CorruptVideoError",
    "DatasetFormatError",
    "FrameIndexError",
    "GopShuffle",
    "GpuMemoryError",
    "ImageLoader",
    "IndexFormatError",
    "MediaError",
    "MultiCameraClips",
    "PathOutsideRootError",
    "Process",
    "RandomFrames",
    "Sampler",
    "SequentialFrames",
    "StaleIndexError",
    "UnsupportedCodecError",
    "VideoIndex",
    "VideoLoader",
    "VideoNotFoundError",
    "VideoRecord",
    "VidloaderError",
    "WorkerError",
    "build_index",
    "decode_frames",
    "probe_video",
]
assert sorted(__all__) == __all__
assert sorted(_HOMES) == __all__

__getattr__, __dir__ = lazy_exports(__name__, _HOMES)
