r"""What a sampler does to the statistics of SGD, measured by running its plans.

:func:`sampling_report` answers two questions about any sampler on an index:

1. **Bias.** Is every sample equally likely? It counts each sample's inclusions over
   ``epochs`` epochs (uniform: all equal; reported as min, max and total-variation distance
   from uniform) and checks that where a sample lands in the epoch does not depend on
   where it sits in the dataset (the failure of streaming shuffle buffers).
2. **Variance.** How clustered are the batches? It measures :math:`\bar m_{gop}` and
   :math:`\bar m_{video}` (size-weighted mean number of batch samples sharing a GOP / a
   video; :mod:`._clustering`), sets them beside the analytic values and those of exact
   uniform sampling, and, given the correlations, the design effect and effective batch size.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..errors import ConfigError
from ..index import VideoIndex
from ..sampling._base import Sampler
from ..sampling._checks import check_int
from ..sampling._gop_table import GopTable, sample_ids
from ._clustering import design_effect, gop_shuffle_mbar, uniform_mbar


@dataclasses.dataclass(frozen=True)
class SamplingReport:
    r"""Bias and clustering of a sampler on one index (from :func:`sampling_report`).

    Attributes:
        sampler (str): the sampler's ``repr``.
        num_samples (int): ``N``, samples in the sampler's space.
        num_gops (int): GOPs holding at least one sample.
        batch_size (int): ``B``.
        epochs (int): epochs run.
        full_batches (int): full batches measured (the clustering figures average these).
        inclusion_min (int), inclusion_max (int): fewest and most times a sample was drawn.
        inclusion_tv (float): total-variation distance between the empirical distribution of
            draws and uniform (0: every sample equally often).
        position_bias (float): correlation between a sample's place in the dataset and its
            mean place in the epoch (0: none; near 1 for a streaming shuffle buffer).
        mbar_gop (float), mbar_video (float): measured :math:`\bar m`.
        mbar_gop_analytic (float | None), mbar_video_analytic (float | None): predicted
            :math:`\bar m` (``None`` where no formula applies, e.g. sequential order).
        uniform_mbar_gop (float), uniform_mbar_video (float): :math:`\bar m` of exact uniform
            sampling without replacement, for comparison.
        gops_per_batch (float), videos_per_batch (float): distinct GOPs / videos per batch.
        rho (float | None): intra-GOP correlation used for the design effect.
        rho_video (float | None): correlation of samples of one video in different GOPs.
    """

    sampler: str
    num_samples: int
    num_gops: int
    batch_size: int
    epochs: int
    full_batches: int
    inclusion_min: int
    inclusion_max: int
    inclusion_tv: float
    position_bias: float
    mbar_gop: float
    mbar_video: float
    mbar_gop_analytic: float | None
    mbar_video_analytic: float | None
    uniform_mbar_gop: float
    uniform_mbar_video: float
    gops_per_batch: float
    videos_per_batch: float
    rho: float | None = None
    rho_video: float | None = None

    def deff_at(self, rho: float, rho_video: float = 0.0) -> float:
        r""":math:`1 + (\bar m_{gop} - 1)\rho + (\bar m_{video} - \bar m_{gop})\rho_v`, measured m̄."""
        return design_effect(self.mbar_gop, rho, self.mbar_video, rho_video)

    @property
    def deff(self) -> float | None:
        """Design effect at the report's correlations (``None`` without ``rho``)."""
        return None if self.rho is None else self.deff_at(self.rho, self.rho_video or 0.0)

    @property
    def uniform_deff(self) -> float | None:
        """Design effect of exact uniform sampling at the same correlations."""
        if self.rho is None:
            return None
        return design_effect(
            self.uniform_mbar_gop, self.rho, self.uniform_mbar_video, self.rho_video or 0.0
        )

    @property
    def effective_batch_size(self) -> float | None:
        """``B / deff``: independent samples the batch is worth."""
        return None if self.deff is None else self.batch_size / self.deff

    def to_dict(self) -> dict:
        """JSON-able fields plus ``deff``, ``uniform_deff`` and ``effective_batch_size``."""
        out = dataclasses.asdict(self)
        out.update(
            deff=self.deff, uniform_deff=self.uniform_deff,
            effective_batch_size=self.effective_batch_size,
        )
        return out

    def __str__(self) -> str:
        lines = [
            f"{self.sampler}: N={self.num_samples} samples in {self.num_gops} GOPs, "
            f"B={self.batch_size}, {self.epochs} epoch(s), {self.full_batches} full batches",
            f"  inclusion per sample: min {self.inclusion_min}, max {self.inclusion_max} "
            f"(TV from uniform {self.inclusion_tv:.4f}); position bias r={self.position_bias:+.3f}",
            f"  m̄_gop   (same-GOP samples per sample):   measured {self.mbar_gop:7.3f}   "
            f"analytic {_fmt(self.mbar_gop_analytic)}   exact uniform {self.uniform_mbar_gop:7.3f}",
            f"  m̄_video (same-video samples per sample): measured {self.mbar_video:7.3f}   "
            f"analytic {_fmt(self.mbar_video_analytic)}   exact uniform {self.uniform_mbar_video:7.3f}",
            f"  distinct per batch: {self.gops_per_batch:.1f} GOPs, {self.videos_per_batch:.1f} videos",
        ]
        if self.deff is None:
            lines.append(
                f"  deff = 1 + (m̄_gop - 1)·rho: {self.deff_at(0.5):.2f} at rho=0.5, "
                f"{self.deff_at(1.0):.2f} at rho=1 (pass rho= for effective batch size)"
            )
        else:
            lines.append(
                f"  deff at rho={self.rho:.3f}, rho_video={self.rho_video or 0.0:.3f}: "
                f"{self.deff:.2f} -> effective batch {self.effective_batch_size:.1f} of "
                f"{self.batch_size} (exact uniform: deff {self.uniform_deff:.2f}, "
                f"{self.batch_size / self.uniform_deff:.1f})"
            )
        return "\n".join(lines)


def _fmt(value: float | None) -> str:
    return "    n/a" if value is None else f"{value:7.3f}"


def sampling_report(
    sampler: Sampler, index: VideoIndex, *, batch_size: int, epochs: int = 3,
    rho: float | None = None, rho_video: float | None = None,
) -> SamplingReport:
    r"""Run ``epochs`` epochs of ``sampler`` on ``index`` (rank 0 of 1) and measure them.

    Samples are assigned to the GOP of their first frame. Clustering is measured on full
    batches: :math:`\bar m = \frac{1}{B}\sum_c m_c^2` per batch, averaged. Pure integer work
    on the plans: nothing is decoded.

    Args:
        sampler: a sampler with a ``sample_space(index)`` method (all built-in ones).
        index: a :class:`~vidloader.index.VideoIndex` (keyframes are needed).
        batch_size: ``B``.
        epochs: epochs to run (inclusion counts sum over them).
        rho: intra-GOP correlation, e.g. from :func:`estimate_intra_gop_correlation`.
        rho_video: correlation of samples of one video in different GOPs (0 if ``None``).

    Returns:
        SamplingReport: printable; ``to_dict()`` for JSON.
    """
    batch_size = check_int("batch_size", batch_size, minimum=1)
    epochs = check_int("epochs", epochs, minimum=1)
    if getattr(sampler, "rows_per_sample", 1) > 1:
        raise ConfigError(
            f"sampling_report measures samplers whose samples are one video's frames; "
            f"{sampler!r} draws rigs of cameras. Its order over (rig, start) pairs is the one "
            "Clips uses over (video, start): report Clips on an index of one camera instead"
        )
    space = sampler.sample_space(index)
    table = GopTable.from_index(index, space)
    run = _Run(table, batch_size)
    for epoch in range(epochs):
        plan = sampler.plan_epoch(index, epoch=epoch, batch_size=batch_size)
        for b in range(len(plan)):
            bp = plan.batch(b)
            run.add(sample_ids(space, bp.video_indices, bp.frame_indices[:, 0]), b / len(plan))
    analytic = analytic_mbar(sampler, table, batch_size)
    uniform = uniform_mbar(table, batch_size)
    return SamplingReport(
        sampler=repr(sampler), num_samples=space.size, num_gops=table.num_gops,
        batch_size=batch_size, epochs=epochs, **run.summary(),
        mbar_gop_analytic=analytic[0], mbar_video_analytic=analytic[1],
        uniform_mbar_gop=uniform[0], uniform_mbar_video=uniform[1], rho=rho, rho_video=rho_video,
    )


def analytic_mbar(sampler: Sampler, table: GopTable, batch_size: int) -> tuple[float | None, float | None]:
    """Predicted ``(m̄_gop, m̄_video)`` for the built-in samplers; ``(None, None)`` otherwise."""
    from ..sampling import GopShuffle

    if isinstance(sampler, GopShuffle):
        window = sampler.window_for(batch_size, table.num_gops, table.sizes)
        return gop_shuffle_mbar(table, batch_size, window, order=sampler.order)
    mode = sampler.epoch_order
    if mode in ("shuffle", "replacement"):
        return uniform_mbar(table, batch_size, replacement=mode == "replacement")
    return None, None


class _Run:
    """Accumulates inclusion counts, epoch positions and per-batch cluster sizes."""

    def __init__(self, table: GopTable, batch_size: int) -> None:
        self.table, self.batch_size = table, batch_size
        n = table.space.size
        self.counts = np.zeros(n, np.int64)
        self.position_sum = np.zeros(n, np.float64)
        self.mbar_gop: list[float] = []
        self.mbar_video: list[float] = []
        self.distinct_gops: list[int] = []
        self.distinct_videos: list[int] = []

    def add(self, ids: np.ndarray, epoch_fraction: float) -> None:
        np.add.at(self.counts, ids, 1)
        np.add.at(self.position_sum, ids, epoch_fraction)
        if len(ids) != self.batch_size:
            return  # a short last batch would dilute the full-batch averages
        gop_sizes = np.unique(self.table.gop_of(ids), return_counts=True)[1]
        video_sizes = np.unique(self.table.videos[self.table.gop_of(ids)], return_counts=True)[1]
        self.mbar_gop.append(float(gop_sizes @ gop_sizes) / len(ids))
        self.mbar_video.append(float(video_sizes @ video_sizes) / len(ids))
        self.distinct_gops.append(len(gop_sizes))
        self.distinct_videos.append(len(video_sizes))

    def summary(self) -> dict:
        seen = self.counts > 0
        total = self.counts.sum()
        tv = 0.5 * float(np.abs(self.counts / total - 1.0 / len(self.counts)).sum())
        return dict(
            full_batches=len(self.mbar_gop),
            inclusion_min=int(self.counts.min()), inclusion_max=int(self.counts.max()),
            inclusion_tv=tv, position_bias=_position_bias(self.position_sum, self.counts, seen),
            mbar_gop=_mean(self.mbar_gop), mbar_video=_mean(self.mbar_video),
            gops_per_batch=_mean(self.distinct_gops), videos_per_batch=_mean(self.distinct_videos),
        )


def _mean(values: list) -> float:
    return float(np.mean(values)) if values else float("nan")


def _position_bias(position_sum: np.ndarray, counts: np.ndarray, seen: np.ndarray) -> float:
    """Correlation of dataset order (sample id) with mean epoch position, over seen samples."""
    if seen.sum() < 3:
        return float("nan")
    mean_position = position_sum[seen] / counts[seen]
    if np.ptp(mean_position) == 0:
        return 0.0
    return float(np.corrcoef(np.flatnonzero(seen), mean_position)[0, 1])
