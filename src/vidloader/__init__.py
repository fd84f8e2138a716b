"""vidloader: fast, exact video frame and clip loading for PyTorch training.

Decode on CPU (FFmpeg through PyAV, resizing inside the decoder) or on NVIDIA GPUs (NVDEC
through PyNvVideoCodec). ``import vidloader`` never imports a GPU library.

Typical use::

    import vidloader
    index = vidloader.build_index("videos/")
    loader = vidloader.VideoLoader(index, sampler=vidloader.RandomFrames(seed=0),
                                   batch_size=128, size=(224, 224), num_workers=8)
    for batch in loader:
        frames = batch["frames"]          # uint8 [128, 224, 224, 3]
"""

import importlib

#: Public name -> the subpackage that defines it. ``import vidloader`` imports none of them:
#: each is imported on first use (``vidloader.VideoLoader``, ``from vidloader import X``), so a
#: command such as ``vidloader info`` that needs only the index never pays for torch.
_HOMES = {
    **dict.fromkeys(["decode_frames"], "decoding"),
    **dict.fromkeys([
        "BackendUnavailableError", "ConfigError", "CorruptVideoError", "FrameIndexError",
        "IndexFormatError", "MediaError", "UnsupportedCodecError", "VideoNotFoundError",
        "VidloaderError", "WorkerError",
    ], "errors"),
    **dict.fromkeys(["VideoIndex", "VideoRecord", "build_index", "probe_video"], "index"),
    **dict.fromkeys(["VideoLoader"], "pipeline"),
    **dict.fromkeys(["Process"], "processing"),
    **dict.fromkeys([
        "Clips", "GopShuffle", "MultiCameraClips", "RandomFrames", "Sampler", "SequentialFrames",
    ], "sampling"),
}

__version__ = "0.1.0"

__all__ = [
    "BackendUnavailableError",
    "Clips",
    "ConfigError",
    "CorruptVideoError",
    "FrameIndexError",
    "GopShuffle",
    "IndexFormatError",
    "MediaError",
    "MultiCameraClips",
    "Process",
    "RandomFrames",
    "Sampler",
    "SequentialFrames",
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


def __getattr__(name: str):
    """Import a public name's subpackage on first use (PEP 562) and cache the name here."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value  # later look-ups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
