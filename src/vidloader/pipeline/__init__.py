"""Pipeline layer: worker processes, shared-memory staging, prefetch, resume, the loader.

The loaders are imported on first use: separation mode's demux workers import this
package's torch-free modules (``_demux``, ``_messages``) and must not pull the loader, hence
torch, in with them.
"""

from .._utils._lazy import lazy_exports

_HOMES = {"ImageLoader": "._image_loader", "VideoLoader": "._loader"}

__all__ = ["ImageLoader", "VideoLoader"]

__getattr__, __dir__ = lazy_exports(__name__, _HOMES)
