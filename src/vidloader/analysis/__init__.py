"""Analysis layer: what a sampler does to the statistics of SGD.

:func:`sampling_report` (bias and clustering of a sampler's plans), the design effect and
``m̄`` of GOP-local sampling (``_clustering``), and the intra-GOP correlation of a dataset's
frames (``_icc``, which decodes frames). It sits above decoding and sampling so that the
sampling layer stays pure: a sampler never opens a file.
"""

from ._clustering import design_effect
from ._icc import IccEstimate, estimate_intra_gop_correlation, intraclass_correlation
from ._report import SamplingReport, sampling_report

__all__ = [
    "IccEstimate",
    "SamplingReport",
    "design_effect",
    "estimate_intra_gop_correlation",
    "intraclass_correlation",
    "sampling_report",
]
