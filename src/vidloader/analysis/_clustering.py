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

from ..sampling._gop_table import GopTable


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


def gop_shuffle_mbar(
    table: GopTable, batch_size: int, window: int, order: str = "uniform"
) -> tuple[float, float]:
    r"""``(m̄_gop, m̄_video)`` of :class:`~vidloader.sampling.GopShuffle` with ``W = window``
    and the uniform in-block order (``order="balanced"``: :func:`balanced_mbar`).

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
    if order == "balanced":
        return balanced_mbar(table, batch_size, window)
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


#: Points of the quadrature over the size of a GOP's block in :func:`balanced_mbar`.
_QUADRATURE_NODES = 9


def _h(x: np.ndarray) -> np.ndarray:
    r""":math:`E[c(c-1)]` for ``c`` the floor or the ceiling of ``x`` with mean ``x``:
    :math:`\lfloor x \rfloor (2x - \lfloor x \rfloor - 1)`, zero for :math:`x \le 1`."""
    whole = np.floor(x)
    return whole * (2 * x - whole - 1)


def _window_pairs(sizes: np.ndarray, blocks: np.ndarray, batch_size: int) -> np.ndarray:
    r"""Same-GOP ordered pairs of one GOP of each size ``g``, in a balanced block of ``M``
    samples, summed over the ``B``-long windows that overlap the block at every offset.

    A GOP of ``g`` samples recurs every ``M / g`` positions, so ``l`` consecutive positions
    of its block hold ``h(l g / M)`` ordered pairs of it. Of the windows of ``B`` positions
    that overlap the block, :math:`|B - M| + 1` overlap it by :math:`L = \min(B, M)`
    positions and two by each ``a`` in ``[1, L)``.
    """
    out = np.empty(len(sizes))
    a = np.arange(1, batch_size, dtype=np.float64)
    rows = max(1, (1 << 20) // max(1, batch_size))  # bounds the [rows, B] temporaries
    for i in range(0, len(sizes), rows):
        g, m = sizes[i:i + rows, None], blocks[i:i + rows, None]
        whole = np.minimum(batch_size, m)
        partial = np.where(a < whole, _h(a * g / m), 0.0).sum(axis=1)
        out[i:i + rows] = ((np.abs(batch_size - m) + 1) * _h(whole * g / m))[:, 0] + 2 * partial
    return out


def balanced_mbar(table: GopTable, batch_size: int, window: int) -> tuple[float, float]:
    r"""``(m̄_gop, m̄_video)`` of :class:`~vidloader.sampling.GopShuffle` with ``W = window``
    and ``order="balanced"``.

    The balanced order puts a GOP of ``g`` samples at every ``≈ M / g``-th position of its
    block of ``M`` samples (exactly every ``w``-th for equal GOPs: each round is the block's
    ``w`` GOPs in one fixed order). So ``l`` consecutive positions inside its block hold
    :math:`c = \lfloor x \rfloor` or :math:`\lceil x \rceil` of its samples,
    :math:`x = lg/M`, and :math:`E[c(c-1)] = h(x) = \lfloor x \rfloor (2x - \lfloor x
    \rfloor - 1)` ordered pairs of it: none unless the GOP is larger than ``M / l``. Blocks
    share no GOP, so the part of a batch in another block adds no pair. Summing over the
    batches at a uniform phase (a batch overlaps a block by ``min(B, M)`` positions, or by
    ``a`` at either end),

    .. math::
        \bar m_{gop} = 1 + \frac{1}{NB} \sum_{\text{GOPs}} \Big[(|B - M_g| + 1)\, h\big(
            \tfrac{L g}{M_g}\big) + 2 \sum_{a=1}^{L-1} h\big(\tfrac{a g}{M_g}\big)\Big],
        \qquad L = \min(B, M_g),

    with :math:`M_g = g + (w - 1)\frac{N - g}{K - 1}` the expected size of the block of a
    GOP of ``g`` (its own samples and ``w - 1`` other GOPs, ``w = K / \lceil K/W \rceil``);
    with one block, batches do not slide over the block and
    :math:`\bar m_{gop} = 1 + \frac{1}{B}\sum h(Bg/N)`. For equal GOPs and blocks of
    ``w >= B`` GOPs this is exactly 1; for ``w < B`` about ``B / w`` (each batch holds every
    GOP of its block ``B / w`` times), against :math:`1 + (B - 1)\frac{G-1}{wG-1}` for the
    uniform order. Two samples of different GOPs share a video with probability ``r`` as in
    :func:`gop_shuffle_mbar` (a GOP's share of rounds is proportional to its size, so the
    pairs are sample-weighted), so :math:`\bar m_{video} = \bar m_{gop} + (B - \bar
    m_{gop})\, r`.

    An approximation with unequal GOPs: a GOP's spacing wanders around ``M / g`` as other
    GOPs enter and leave rounds, and blocks differ in size.
    """
    n, g2, v2 = _sums(table)
    b, k = int(batch_size), table.num_gops
    num_blocks = -(-k // window)
    sizes, counts = np.unique(table.sizes, return_counts=True)
    sizes, counts = sizes.astype(np.float64), counts.astype(np.float64)
    if num_blocks == 1:
        pairs = float(_h(b * sizes / n) @ counts) / b
    else:
        # The rest of a GOP's block: w - 1 other GOPs drawn without replacement, a sum of
        # mean (w-1)(N-g)/(K-1) and variance (w-1) s^2 (K-w)/(K-2); h is convex, so average
        # over it (Gauss-Hermite, normal approximation) rather than put in its mean.
        others = (k / num_blocks) - 1
        mean = others * (n - sizes) / (k - 1)
        spread = np.sqrt(others * table.sizes.var() * max(0.0, k - 1 - others) / max(1, k - 2))
        nodes, weights = np.polynomial.hermite_e.hermegauss(_QUADRATURE_NODES)
        weights = weights / weights.sum()
        pairs = 0.0
        for z, weight in zip(nodes, weights):
            blocks = sizes + np.maximum(mean + z * spread, others)  # each other GOP >= 1
            pairs += weight * float(_window_pairs(sizes, blocks, b) @ counts)
        pairs /= n * b
    m_gop = 1 + pairs
    r = (v2 - g2) / (n * n - g2) if n * n > g2 else 0.0
    return m_gop, m_gop + (b - m_gop) * r


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
