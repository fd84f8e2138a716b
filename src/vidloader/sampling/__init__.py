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
from ._icc import IccEstimate, estimate_intra_gop_correlation, intraclass_correlation
from ._labels import resolve_labels
from ._multicam import MultiCameraClips, MultiCameraEpoch
from ._stats import SamplingReport, sampling_report

__all__ = [
    "BatchPlan",
    "Clips",
    "EpochPlan",
    "GopShuffle",
    "IccEstimate",
    "MultiCameraClips",
    "MultiCameraEpoch",
    "RandomFrames",
    "Sampler",
    "SamplingReport",
    "SequentialFrames",
    "detect_rank_world",
    "estimate_intra_gop_correlation",
    "intraclass_correlation",
    "resolve_labels",
    "sampling_report",
]
