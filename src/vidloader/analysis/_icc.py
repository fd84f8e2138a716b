r"""How alike are frames of one GOP? The intraclass correlation, estimated on decoded frames.

The design effect of GOP-local sampling is :math:`1 + (\bar m - 1)\rho`; :math:`\bar m`
comes from the sampler (:mod:`._clustering`), :math:`\rho` from the data. This module
estimates :math:`\rho` as the one-way ANOVA intraclass correlation of a per-frame feature
over pairs of frames drawn from one GOP (or one video, or at random for a null baseline).
"""

from __future__ import annotations

import dataclasses
from typing import Literal

import numpy as np

from ..errors import ConfigError
from ..sampling._checks import check_int
from ..sampling._gop_table import GopTable
from ..sampling._space import ClipShape, SampleSpace

Feature = Literal["pixels", "mean_rgb"]
Level = Literal["gop", "video", "random"]


def intraclass_correlation(groups: np.ndarray) -> float:
    r"""One-way ANOVA intraclass correlation ICC(1) of equal-size groups.

    For ``n`` groups of ``k`` observations :math:`y_{gi}` (vectors of ``d`` features: the
    sums of squares add over features, so the result is the share of the *total* variance
    that lies between groups),

    .. math::
        MSB = \frac{k \sum_g \lVert\bar y_g - \bar y\rVert^2}{n - 1}, \quad
        MSW = \frac{\sum_{g,i} \lVert y_{gi} - \bar y_g\rVert^2}{n (k - 1)}, \quad
        \hat\rho = \frac{MSB - MSW}{MSB + (k - 1) MSW}.

    Under :math:`y_{gi} = \mu + a_g + e_{gi}` (independent, variances :math:`\sigma_a^2,
    \sigma_e^2`), :math:`E[MSB] = \sigma_e^2 + k\sigma_a^2` and :math:`E[MSW] =
    \sigma_e^2`, so :math:`\hat\rho` estimates :math:`\sigma_a^2 / (\sigma_a^2 +
    \sigma_e^2)`, the correlation of two members of a group. It may come out negative
    (down to :math:`-1/(k-1)`) when groups are no more alike than random pairs.

    Args:
        groups (np.ndarray): ``[n, k]`` or ``[n, k, d]`` observations, ``n, k >= 2``.

    Returns:
        float: :math:`\hat\rho`.
    """
    y = np.asarray(groups, np.float64)
    if y.ndim == 2:
        y = y[..., None]
    if y.ndim != 3 or y.shape[0] < 2 or y.shape[1] < 2:
        raise ConfigError(f"need [groups >= 2, members >= 2(, features)] data, got shape {y.shape}")
    n, k = y.shape[:2]
    means = y.mean(axis=1)
    msb = k * float(((means - means.mean(axis=0)) ** 2).sum()) / (n - 1)
    msw = float(((y - means[:, None]) ** 2).sum()) / (n * (k - 1))
    denominator = msb + (k - 1) * msw
    return (msb - msw) / denominator if denominator > 0 else 0.0


def bootstrap_pair_icc(pairs: np.ndarray, *, resamples: int, seed: int) -> np.ndarray:
    r"""ICC of ``resamples`` bootstrap resamples (with replacement) of the pairs ``[n, 2, d]``.

    A resample is a vector of counts ``c`` (summing to ``n``); its between-pair sum of
    squares is :math:`\sum_i c_i \lVert m_i\rVert^2 - \lVert\sum_i c_i m_i\rVert^2 / n`
    (pair means :math:`m_i`), computed through the Gram matrix of the means when the
    features outnumber the pairs, so no resample touches the raw features.
    """
    y = np.asarray(pairs, np.float64).reshape(len(pairs), 2, -1)
    n, d = len(y), y.shape[2]
    means = y.mean(axis=1)
    within = ((y - means[:, None]) ** 2).sum(axis=(1, 2))
    means -= means.mean(axis=0)  # shifting all data leaves the ICC unchanged, helps precision
    weights = np.random.default_rng(seed).multinomial(n, np.full(n, 1.0 / n), size=resamples)
    weights = weights.astype(np.float64)
    if d <= n:
        totals = weights @ means
        spread = weights @ (means**2).sum(axis=1) - (totals**2).sum(axis=1) / n
    else:
        gram = means @ means.T
        spread = weights @ np.diag(gram) - ((weights @ gram) * weights).sum(axis=1) / n
    msb = 2 * spread / (n - 1)
    msw = weights @ within / n
    return (msb - msw) / np.maximum(msb + msw, 1e-300)


@dataclasses.dataclass(frozen=True)
class IccEstimate:
    """An intraclass correlation estimated from frame pairs.

    Attributes:
        rho (float): the ANOVA estimate.
        stderr (float): bootstrap standard error (pairs resampled).
        ci95 (tuple[float, float]): bootstrap 95% percentile interval.
        num_pairs (int): pairs used.
        level (str): ``"gop"`` (same GOP), ``"video"`` (same video, different GOPs) or
            ``"random"`` (independent frames: should be about 0).
        feature (str): ``"pixels"`` or ``"mean_rgb"``.
        size (tuple[int, int]): decoded size.
    """

    rho: float
    stderr: float
    ci95: tuple[float, float]
    num_pairs: int
    level: str
    feature: str
    size: tuple[int, int]

    def __str__(self) -> str:
        return (
            f"rho_{self.level}({self.feature} @ {self.size[0]}x{self.size[1]}) = {self.rho:.3f} "
            f"± {self.stderr:.3f} (95% CI {self.ci95[0]:.3f}..{self.ci95[1]:.3f}, "
            f"{self.num_pairs} pairs)"
        )


def estimate_intra_gop_correlation(
    index, *, num_pairs: int = 256, size: tuple[int, int] = (64, 64),
    feature: Feature = "pixels", level: Level = "gop", seed: int = 0, backend: str = "cpu",
    resamples: int = 1000,
) -> IccEstimate:
    r"""Estimate :math:`\rho` on real decoded frames, as the ANOVA ICC over frame pairs.

    Draws ``num_pairs`` pairs of distinct frames: of one GOP (GOP picked with probability
    proportional to its ``g (g - 1)`` ordered pairs, as in a batch), of one video in
    different GOPs, or independently at random. Decodes them with
    :func:`vidloader.decode_frames` at ``size`` and computes :func:`intraclass_correlation`
    of the feature: ``"pixels"`` (all ``H*W*3`` values in ``[0, 1]``: the share of pixel
    variance between GOPs) or ``"mean_rgb"`` (each frame's mean colour). A pixel correlation
    is an upper-end proxy for the gradient correlation the design effect is about:
    augmentation and the model decorrelate frames further.

    Args:
        index: a :class:`~vidloader.index.VideoIndex`.
        num_pairs: pairs to decode (``>= 3``).
        size: ``(height, width)`` to decode at.
        feature: ``"pixels"`` or ``"mean_rgb"``.
        level: ``"gop"``, ``"video"`` or ``"random"``.
        seed: seed of the pair draw and the bootstrap.
        backend: decoding backend.
        resamples: bootstrap resamples for the standard error.

    Returns:
        IccEstimate: the estimate and its uncertainty.

    Raises:
        ConfigError: a bad option, or no GOP / video with two frames for the level.
    """
    num_pairs = check_int("num_pairs", num_pairs, minimum=3)
    if feature not in ("pixels", "mean_rgb"):
        raise ConfigError(f"feature must be 'pixels' or 'mean_rgb', got {feature!r}")
    if level not in ("gop", "video", "random"):
        raise ConfigError(f"level must be 'gop', 'video' or 'random', got {level!r}")
    space = SampleSpace(index.num_frames, ClipShape())
    space.check_not_empty("estimate_intra_gop_correlation")
    table = GopTable.from_index(index, space)
    rng = np.random.default_rng(seed)
    ids = _DRAWS[level](table, num_pairs, rng)  # [num_pairs, 2] frame (sample) ids
    features = _features(index, space, ids, size, feature, backend)
    rho = intraclass_correlation(features)
    boot = bootstrap_pair_icc(features, resamples=resamples, seed=seed)
    low, high = np.quantile(boot, [0.025, 0.975])
    return IccEstimate(
        rho=float(rho), stderr=float(boot.std(ddof=1)), ci95=(float(low), float(high)),
        num_pairs=num_pairs, level=level, feature=feature, size=(int(size[0]), int(size[1])),
    )


def _pairs_in_gops(table: GopTable, count: int, rng: np.random.Generator) -> np.ndarray:
    sizes = table.sizes.astype(np.float64)
    weights = sizes * (sizes - 1)
    if weights.sum() == 0:
        raise ConfigError("no GOP holds two frames: intra-GOP correlation is undefined")
    gops = rng.choice(len(sizes), size=count, p=weights / weights.sum())
    g = table.sizes[gops]
    first = rng.integers(0, g)
    second = rng.integers(0, g - 1)
    second += second >= first  # a distinct second frame, uniform over the others
    return np.stack([table.starts[gops] + first, table.starts[gops] + second], axis=1)


def _pairs_in_videos(table: GopTable, count: int, rng: np.random.Generator) -> np.ndarray:
    counts = table.space.counts.astype(np.float64)
    per_video_g2 = np.bincount(table.videos, table.sizes.astype(np.float64) ** 2, len(counts))
    weights = counts**2 - per_video_g2  # ordered pairs of one video in different GOPs
    if weights.sum() <= 0:
        raise ConfigError("no video holds two GOPs: inter-GOP, intra-video correlation is undefined")
    videos = rng.choice(len(counts), size=count, p=weights / weights.sum())
    out = np.empty((count, 2), np.int64)
    for i, v in enumerate(videos.tolist()):  # rejection: few tries, as most pairs qualify
        lo, n = table.space.offsets[v], table.space.counts[v]
        while True:
            a, b = lo + rng.integers(0, n, size=2)
            if table.gop_of(a) != table.gop_of(b):
                out[i] = a, b
                break
    return out


def _pairs_at_random(table: GopTable, count: int, rng: np.random.Generator) -> np.ndarray:
    return rng.integers(0, table.space.size, size=(count, 2))


_DRAWS = {"gop": _pairs_in_gops, "video": _pairs_in_videos, "random": _pairs_at_random}


def _features(index, space: SampleSpace, ids: np.ndarray, size, feature: str, backend: str) -> np.ndarray:
    """``[pairs, 2, d]`` features of the frames ``ids`` (decoded video by video, each once)."""
    from ..decoding import decode_frames  # late: importing the analysis layer decodes nothing

    flat = ids.ravel()
    videos, frames = space.locate(flat)
    frames = frames[:, 0]
    out = None
    for v in np.unique(videos).tolist():
        rows = np.flatnonzero(videos == v)
        pixels = decode_frames(index[v].path, frames[rows], size=tuple(size), backend=backend,
                               index_record=index[v])
        values = pixels.cpu().numpy().astype(np.float32) / 255.0
        values = values.reshape(len(rows), -1) if feature == "pixels" else values.mean(axis=(1, 2))
        if out is None:
            out = np.empty((len(flat), values.shape[1]), np.float32)
        out[rows] = values
    return out.reshape(ids.shape[0], 2, -1)
