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

from .decoding import decode_frames
from .errors import (
    BackendUnavailableError,
    ConfigError,
    CorruptVideoError,
    FrameIndexError,
    IndexFormatError,
    MediaError,
    UnsupportedCodecError,
    VideoNotFoundError,
    VidloaderError,
    WorkerError,
)
from .index import VideoIndex, VideoRecord, build_index, probe_video
from .pipeline import VideoLoader
from .processing import Process
from .sampling import Clips, GopShuffle, MultiCameraClips, RandomFrames, Sampler, SequentialFrames

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
