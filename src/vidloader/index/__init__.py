"""Index layer: probe videos (demux only) and store what every other layer needs to know."""

from ._build import build_index
from ._probe import probe_video
from ._record import RejectedVideo, VideoIndex, VideoRecord

__all__ = ["RejectedVideo", "VideoIndex", "VideoRecord", "build_index", "probe_video"]
