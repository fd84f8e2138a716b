"""Processing layer: NVVL-style resize, crop, flip, frame selection, dtype, normalise, layout."""

from ._finalize import finalize
from ._geometry import Geometry, SampleTransform, apply_window, geometry, sample_transform, upright
from ._spec import Process, as_outputs

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
