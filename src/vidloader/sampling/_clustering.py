r"""Analytic cluster sizes of batches: how many samples of a batch share a GOP or a video.

For a batch of ``B`` samples with ``m_c`` of them in cluster ``c`` (a GOP, or a video), the
quantity that sets the variance of the batch mean is the *size-weighted* mean cluster size

.. math:: \bar m = \frac{1}{B}\sum_c m_c^2 = 1 + \frac{\#\{\text{ordered pairs in one cluster}\}}{B},

the expected number of batch samples that share the cluster of a random batch sample,
itself included. With exchangeable correlation :math:`\rho` inside a cluster,
:math:`\operatorname{Var}(\bar y) = \frac{\sigma^2}{B}(1 + (\bar m - 1)\rho)`. Each of the
``B(B-1)`` ordered pairs of a batch lies in one cluster with some probability ``q``, so
:math:`\bar m = 1 + (B - 1) q`; the functions here give ``q`` for each sampling scheme.
"""

from __future__ import annotations

import numpy as np

from ._gop_table import GopTable


def _sums(table: GopTable) -> tuple[float, float, float]:
    """``N``, ``sum g^2`` over GOPs and ``sum n^2`` over videos (sample counts)."""
    gops = table.sizes.astype(np.float64)
    videos = table.space.counts.astype(np.float64)
    return float(gops.sum()), float(gops @ gops), float(videos @ videos)


def uniform_mbar(table: GopTable, batch_size: int, *, replacement: bool = False) -> tuple[float, float]:
    r"""``(m̄_gop, m̄_video)`` of exact uniform sampling over the samples of ``table``.

    Without replacement a pair of distinct samples shares a GOP with probability
    :math:`q = \sum_g g(g-1) / (N(N-1))` (a video: the same with video sizes), so
    :math:`\bar m = 1 + (B-1)\frac{G_w - 1}{N - 1}` with :math:`G_w = \sum g^2 / N`
    (:math:`\approx 1 + (B-1)G/N` for equal GOPs of ``G``). With replacement two draws
    share a GOP with probability :math:`\sum_g g^2 / N^2`.
    """
    n, g2, v2 = _sums(table)
    if replacement:
        q_gop, q_video = g2 / n**2, v2 / n**2
    else:
        pairs = n * (n - 1)
        q_gop = (g2 - n) / pairs if pairs else 0.0
        q_video = (v2 - n) / pairs if pairs else 0.0
    return 1 + (batch_size - 1) * q_gop, 1 + (batch_size - 1) * q_video


def straddle_factor(batch_size: int, block_samples: float) -> float:
    r"""Share of a batch's ordered pairs that lie in one block, for blocks of ``M`` samples.

    A batch starting at a uniform phase of a block either lies inside it or straddles two
    (or more, when ``B > M``) blocks. Averaging :math:`\sum_i b_i(b_i-1)` over the phase, with
    :math:`b_i` the batch's samples in block ``i``, gives for :math:`B \le M`

    .. math:: f = 1 - \frac{B + 1}{3M},

    and is summed over phases exactly when :math:`B > M`.
    """
    b, m = int(batch_size), max(1, int(round(block_samples)))
    if b <= 1:
        return 1.0
    if b <= m:
        return 1.0 - (b + 1) / (3.0 * m)
    phase = np.arange(m, dtype=np.float64)
    first = np.minimum(b, m - phase)
    full, last = np.divmod(b - first, m)
    pairs = first * (first - 1) + full * m * (m - 1) + last * (last - 1)
    return float(pairs.mean() / (b * (b - 1)))


def gop_shuffle_mbar(table: GopTable, batch_size: int, window: int) -> tuple[float, float]:
    r"""``(m̄_gop, m̄_video)`` of :class:`~vidloader.sampling.GopShuffle` with ``W = window``.

    A block holds about ``W`` random GOPs (exactly :math:`K / \lceil K / W \rceil` on
    average: blocks are balanced), :math:`M = N / \lceil K / W \rceil \approx W \bar G`
    samples (:math:`\bar G = N / K`).
    Two distinct samples of one block share a GOP with probability
    :math:`q = \frac{G_w - 1}{M - 1}` (:math:`G_w = \sum g^2 / N`, the GOP size seen by a
    random sample); two samples in different GOPs share a video with probability
    :math:`r = \frac{\sum n^2 - \sum g^2}{N^2 - \sum g^2}`, whether or not they share a
    block, since a block's GOPs are a random subset. With :math:`f` the
    :func:`straddle_factor`,

    .. math::
        \bar m_{gop} = 1 + (B-1)\, f\, q, \qquad
        \bar m_{video} = 1 + (B-1)\,[\,f\,(q + (1-q)\,r) + (1-f)\,r\,].

    For equal GOPs of ``G`` and :math:`B \ll M` this is :math:`1 + (B-1)\frac{G-1}{WG-1}`.
    With ``W`` at least the number of GOPs there is one block: uniform sampling.
    """
    n, g2, v2 = _sums(table)
    num_blocks = -(-table.num_gops // window)
    if num_blocks == 1:
        return uniform_mbar(table, batch_size)
    block = n / num_blocks  # balanced blocks: K / ceil(K / W) GOPs each
    q = (g2 / n - 1) / (block - 1) if block > 1 else 0.0
    r = (v2 - g2) / (n * n - g2) if n * n > g2 else 0.0
    f = straddle_factor(batch_size, block)
    m_gop = 1 + (batch_size - 1) * f * q
    m_video = 1 + (batch_size - 1) * (f * (q + (1 - q) * r) + (1 - f) * r)
    return m_gop, m_video


def design_effect(m_gop: float, rho: float, m_video: float | None = None, rho_video: float = 0.0) -> float:
    r"""Variance inflation of a batch mean under nested clustering (GOPs inside videos).

    .. math:: \text{deff} = 1 + (\bar m_{gop} - 1)\rho + (\bar m_{video} - \bar m_{gop})\rho_v

    with :math:`\rho` the correlation of two samples of one GOP and :math:`\rho_v` that of
    two samples of one video in different GOPs. With :math:`\rho_v = 0` it is the textbook
    cluster-sampling :math:`1 + (\bar m - 1)\rho`. The batch is worth ``B / deff``
    independent samples.
    """
    extra = 0.0 if m_video is None else (m_video - m_gop) * rho_video
    return 1.0 + (m_gop - 1.0) * rho + extra
