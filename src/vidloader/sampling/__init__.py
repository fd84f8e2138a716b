"""Sampling layer: pure, deterministic samplers from (index, seed, epoch, rank) to batch plans.

A sampler never opens a file and uses only ``index.num_frames``; batch ``b`` of an epoch is
computable on its own, so resume is "start at batch b" and any number of workers gets the
same stream.
"""

from ._base import BatchPlan, EpochPlan, Sampler
from ._clips import Clips
from ._distributed import detect_rank_world
from ._frames import RandomFrames, SequentialFrames
from ._labels import resolve_labels

__all__ = [
    "BatchPlan",
    "Clips",
    "EpochPlan",
    "RandomFrames",
    "Sampler",
    "SequentialFrames",
    "detect_rank_world",
    "resolve_labels",
]
