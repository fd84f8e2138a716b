"""The sampler contract: pure functions from (index, seed, epoch, rank) to batch plans.

A sampler never opens a file. Its epoch is addressed by batch number, so a loader can start at
any batch (resume), hand batches to any number of workers, and get the same stream.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Iterator

import numpy as np

from ..index import VideoIndex


@dataclasses.dataclass(frozen=True, eq=False)
class BatchPlan:
    """Which frames one batch holds. Pure data: cheap to pickle to a worker.

    Attributes:
        epoch (int): epoch the batch belongs to.
        batch_index (int): position of the batch in this rank's epoch (0-based).
        video_indices (np.ndarray): int64 ``[B]`` video of each sample (index position).
        frame_indices (np.ndarray): int64 ``[B, T]`` display frame numbers of each sample;
            ``T == 1`` for single frames, ``T == sequence_length`` for clips.
        sample_seeds (np.ndarray): uint64 ``[B]`` per-sample seed for random processing (crop,
            flip), a pure function of (seed, epoch, sample position): resumes reproduce it.
        is_clip (bool): whether outputs keep the ``T`` axis.
        labels (np.ndarray | None): int64 ``[B]`` labels, filled in by the loader.
    """

    epoch: int
    batch_index: int
    video_indices: np.ndarray
    frame_indices: np.ndarray
    sample_seeds: np.ndarray
    is_clip: bool = False
    labels: np.ndarray | None = None

    @property
    def batch_size(self) -> int:
        return len(self.video_indices)

    @property
    def sequence_length(self) -> int:
        return self.frame_indices.shape[1]

    def with_labels(self, labels: np.ndarray | None) -> BatchPlan:
        return dataclasses.replace(self, labels=labels)

    def rows(self, start: int, stop: int) -> BatchPlan:
        """Rows ``start:stop`` as a plan of their own (same epoch and batch index): the share
        of a batch that one unit of work fills."""
        keep = slice(start, stop)
        return dataclasses.replace(
            self, video_indices=self.video_indices[keep], frame_indices=self.frame_indices[keep],
            sample_seeds=self.sample_seeds[keep],
            labels=None if self.labels is None else self.labels[keep],
        )


class EpochPlan(abc.ABC):
    """One rank's epoch: ``len(plan)`` batches, each computable on its own by number."""

    @abc.abstractmethod
    def __len__(self) -> int: ...

    @abc.abstractmethod
    def batch(self, batch_index: int) -> BatchPlan:
        """The plan of batch ``batch_index`` (``0 <= batch_index < len(self)``)."""

    def __iter__(self) -> Iterator[BatchPlan]:
        return (self.batch(b) for b in range(len(self)))


class Sampler(abc.ABC):
    """Base of every sampler: configuration only; :meth:`plan_epoch` binds it to an index."""

    #: Whether batches carry a time axis (clips) or single frames.
    is_clip: bool = False
    #: Rows each sample fills (the cameras of a :class:`MultiCameraClips` rig): ``plan_epoch``
    #: takes ``batch_size`` samples and plans ``batch_size * rows_per_sample`` rows, and the
    #: loader's outputs gain an axis of this length after the batch axis when it is over 1.
    rows_per_sample: int = 1

    @property
    def epoch_order(self) -> str | None:
        """How an epoch orders its samples, when it is one of the laws the analysis knows
        (``"sequential"``, ``"shuffle"``: a uniform permutation, ``"replacement"``: i.i.d.
        uniform draws); ``None`` for any other law."""
        return None

    @abc.abstractmethod
    def num_samples(self, index: VideoIndex) -> int:
        """Samples in one epoch over all ranks together."""

    @abc.abstractmethod
    def plan_epoch(
        self,
        index: VideoIndex,
        *,
        epoch: int,
        batch_size: int,
        rank: int = 0,
        world_size: int = 1,
        drop_last: bool = False,
    ) -> EpochPlan:
        """This rank's share of epoch ``epoch`` as a random-access sequence of batch plans."""

    def config(self) -> dict:
        """A JSON-able description (stored in ``state_dict`` to refuse a mismatched resume)."""
        return {"type": type(self).__name__, **{
            k: v for k, v in vars(self).items() if not k.startswith("_")
        }}
