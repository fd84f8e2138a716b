"""Sampling layer: pure, deterministic samplers from (index, seed, epoch, rank) to batch plans.

A sampler never opens a file and uses only ``index.num_frames`` (and, for GOP-aware
sampling, each video's keyframes); batch ``b`` of an epoch is computable on its own, so
resume is "start at batch b" and any number of workers gets the same stream.
"""

from ._base import BatchPlan, EpochPlan, Sampler
from ._clips import Clips
from ._distributed import detect_rank_world
from ._frames import RandomFrames, SequentialFrames
from ._gop_shuffle import GopShuffle
from ._labels import resolve_labels
from ._multicam import MultiCameraClips, MultiCameraEpoch

__all__ = [
    "BatchPlan",
    "Clips",
    "EpochPlan",
    "GopShuffle",
    "MultiCameraClips",
    "MultiCameraEpoch",
    "RandomFrames",
    "Sampler",
    "SequentialFrames",
    "detect_rank_world",
    "resolve_labels",
]

#: Names that moved to :mod:`vidloader.analysis` (the sampling layer decodes nothing); still
#: importable from here, resolved on first use so that importing sampling imports no decoder.
_MOVED_TO_ANALYSIS = frozenset({
    "IccEstimate", "SamplingReport", "estimate_intra_gop_correlation", "intraclass_correlation",
    "sampling_report",
})


def __getattr__(name: str):
    if name in _MOVED_TO_ANALYSIS:
        import importlib

        return getattr(importlib.import_module("vidloader.analysis"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
