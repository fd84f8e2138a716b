"""Pipeline layer: worker processes, shared-memory staging, prefetch, resume, the loader."""

from ._loader import VideoLoader

__all__ = ["VideoLoader"]
