"""Pipeline layer: worker processes, shared-memory staging, prefetch, resume, the loader."""

from ._image_loader import ImageLoader
from ._loader import VideoLoader

__all__ = ["ImageLoader", "VideoLoader"]
