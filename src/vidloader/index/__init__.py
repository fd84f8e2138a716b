"""Index layer: probe videos (demux only) and store what every other layer needs to know."""

from ._build import build_index
from ._probe import probe_video
from ._record import RejectedVideo, VideoIndex, VideoRecord
from ._streams import StreamChoice, describe_streams

__all__ = ["RejectedVideo", "StreamChoice", "VideoIndex", "VideoRecord", "build_index",
           "describe_streams", "probe_video"]
