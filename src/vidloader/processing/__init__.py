"""Processing layer: NVVL-style resize, crop, flip, frame selection, dtype, normalise, layout.

Its public names are imported on first use: the geometry and the spec are numpy only, and a
CPU decode worker (which never loads torch) uses them; ``finalize`` is torch's.
"""

from .._utils._lazy import lazy_exports

_HOMES = {
    "finalize": "._finalize",
    **dict.fromkeys(["Geometry", "SampleTransform", "apply_window", "geometry",
                     "sample_transform", "upright"], "._geometry"),
    **dict.fromkeys(["Process", "as_outputs"], "._spec"),
}

__all__ = [
    "Geometry",
    "Process",
    "SampleTransform",
    "apply_window",
    "as_outputs",
    "finalize",
    "geometry",
    "sample_transform",
    "upright",
]

__getattr__, __dir__ = lazy_exports(__name__, _HOMES)
