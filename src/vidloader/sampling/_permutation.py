"""Keyed pseudo-random functions of 64-bit integers, vectorised in numpy.

- :func:`mix64` and :func:`derive_seed` turn ``(seed, epoch, ...)`` into independent 64-bit keys.
- :func:`counter_stream` is the SplitMix64 generator addressed by draw number: value ``c`` of a
  stream is computable without the ``c`` values before it.
- :func:`uniform_below` draws exact uniform integers in ``[0, n)`` from such a stream.
- :class:`KeyedPermutation` is a keyed bijection of ``[0, n)``.

Why not ``rng.permutation(n)``: an epoch of billions of frames cannot be held in memory, and
batch ``b`` must be computable without computing batches ``0 .. b-1``. A keyed bijection maps
any epoch position to its sample directly, in O(1) work per position.
"""

from __future__ import annotations

import math

import numpy as np

MASK64 = (1 << 64) - 1
#: 2**64 / golden ratio: SplitMix64's increment (odd, so ``c * GOLDEN`` is a bijection mod 2**64).
GOLDEN = 0x9E3779B97F4A7C15
_MUL1 = 0xBF58476D1CE4E5B9
_MUL2 = 0x94D049BB133111EB
_SEED_SALT = 0x2545F4914F6CDD1D
_COMBINE = 0xD6E8FEB86659FD93  # odd: multiplying by it is a bijection mod 2**64

#: Fewest Feistel rounds (each round rewrites one half). Luby-Rackoff needs 4 for a
#: pseudo-random permutation; 8 buys margin.
MIN_FEISTEL_ROUNDS = 8
#: Largest half-domain (values one Feistel half can take) for which a permutation tabulates its
#: round functions: at most 2**15 entries a round, 2 MiB for 8 rounds, for ``n <= 2**30``.
MAX_TABLE_HALF = 1 << 15


def mix64(x: int | np.ndarray) -> int | np.ndarray:
    """SplitMix64's finalizer: a bijective mix of 64-bit integers where every input bit
    affects every output bit.

    Args:
        x (int | np.ndarray): a Python int (taken modulo 2**64) or an integer array.

    Returns:
        int | np.ndarray: a Python int in ``[0, 2**64)``, or a uint64 array of ``x``'s shape.
    """
    if isinstance(x, np.ndarray):
        return _mix64_array(x.astype(np.uint64, copy=False))
    z = int(x) & MASK64
    z = ((z ^ (z >> 30)) * _MUL1) & MASK64
    z = ((z ^ (z >> 27)) * _MUL2) & MASK64
    return z ^ (z >> 31)


def _mix64_array(z: np.ndarray) -> np.ndarray:
    # uint64 array arithmetic wraps modulo 2**64 silently, which is what the mixer wants.
    z = (z ^ (z >> np.uint64(30))) * np.uint64(_MUL1)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(_MUL2)
    return z ^ (z >> np.uint64(31))


def derive_seed(seed: int, *values: int) -> int:
    """A 64-bit key derived from ``seed`` and any number of integers (epoch, purpose tag …).

    Chained, so the order of ``values`` matters and ``derive_seed(s, a, b)`` is unrelated to
    ``derive_seed(s, b, a)`` and to ``derive_seed(s, a)``. Integers are taken modulo 2**64.

    Args:
        seed (int): the user's seed.
        *values (int): what the key is for.

    Returns:
        int: a key in ``[0, 2**64)``.
    """
    # Seed and values go through different maps, so derive_seed(a, b) != derive_seed(b, a);
    # each step is a bijection of the previous key and of the value, so keys that differ in
    # one argument never collide.
    key = mix64(int(seed) ^ _SEED_SALT)
    for value in values:
        key = mix64(key * _COMBINE + mix64(int(value) + GOLDEN))
    return key


def counter_stream(key: int, counters: np.ndarray) -> np.ndarray:
    """Values number ``counters`` of the SplitMix64 generator seeded with ``key``.

    Value ``c`` is ``mix64(key + (c + 1) * GOLDEN)``, exactly what SplitMix64 returns on its
    ``c``-th call, so the stream has that generator's statistical quality while any value can
    be computed on its own.

    Args:
        key (int): stream key, e.g. from :func:`derive_seed`.
        counters (np.ndarray): non-negative integer draw numbers, any shape.

    Returns:
        np.ndarray: uint64 values, same shape as ``counters``.
    """
    c = np.asarray(counters).astype(np.uint64)
    return _mix64_array(c * np.uint64(GOLDEN) + np.uint64((int(key) + GOLDEN) & MASK64))


def uniform_below(key: int, counters: np.ndarray, n: int) -> np.ndarray:
    """Draws number ``counters`` of an i.i.d. sequence uniform over ``[0, n)``.

    Exact: values of the 64-bit stream at or above the largest multiple of ``n`` are redrawn
    (from derived streams) instead of folded in by ``%``, which would favour small results.
    The redraw is needed with probability below ``n / 2**64``.

    Args:
        key (int): stream key.
        counters (np.ndarray): non-negative integer draw numbers, any shape.
        n (int): size of the range, ``1 <= n < 2**63``.

    Returns:
        np.ndarray: int64 draws, same shape as ``counters``.
    """
    c = np.asarray(counters)
    values = counter_stream(key, c)
    limit = ((1 << 64) // n) * n
    if limit < (1 << 64):
        bad = np.flatnonzero(values >= np.uint64(limit))
        attempt = 0
        while bad.size:
            attempt += 1
            values.flat[bad] = counter_stream(derive_seed(key, attempt), c.flat[bad])
            bad = bad[values.flat[bad] >= np.uint64(limit)]
    return (values % np.uint64(n)).astype(np.int64)


def feistel_rounds(bits: int) -> int:
    """Rounds for a Feistel network on ``bits``-bit values.

    A round on a tiny domain draws its function from a tiny set (on 3 bits: 16 functions), so
    mixing takes more rounds there: with 8 rounds on 3 bits, the pair (image of 0, image of 1)
    over many keys fails a chi-square test at p < 1e-50; with this rule (32 rounds on 3 bits,
    8 from 12 bits up) pairs and triples pass for every ``n`` tried. Large domains, where the
    speed matters, keep the minimum.
    """
    return max(MIN_FEISTEL_ROUNDS, 2 * math.ceil(48 / bits))


class KeyedPermutation:
    """A keyed pseudo-random bijection of ``[0, n)``, evaluated pointwise and vectorised.

    A position ``x < 2**bits`` (``2**bits`` the next power of two, at least 4) is split into a
    high and a low half. Each round XORs one half with a keyed mix of the other, alternating
    halves (a Feistel network written without the swap, so the halves may differ in size when
    ``bits`` is odd). A round is invertible whatever the mix, so the whole is a bijection of
    ``[0, 2**bits)``. Cycle-walking (apply again while the result is ``>= n``) restricts it to
    ``[0, n)``: from a point of ``[0, n)`` the walk follows its cycle to the next point that is
    back in ``[0, n)``, so the restriction is again a bijection. As ``2**bits < 2n`` (for
    ``n > 2``), a walk takes under two steps on average.

    With halves of 2 bits or more every round is an even permutation, so only even
    permutations of ``[0, 2**bits)`` occur. What sampling needs still holds: over keys, the
    image of a position, and pairs of images, are uniform (tested); so are triples (checked
    over 30,000 keys for every ``n <= 8``).

    Args:
        n (int): size of the domain, ``>= 1``.
        key (int): the permutation's key (from :func:`derive_seed`).
        rounds (int | None): Feistel rounds; by default :func:`feistel_rounds` of the domain.
    """

    def __init__(self, n: int, key: int, *, rounds: int | None = None) -> None:
        if n < 1:
            raise ValueError(f"a permutation needs n >= 1, got {n}")
        self.n = int(n)
        bits = max(2, (self.n - 1).bit_length())
        rounds = feistel_rounds(bits) if rounds is None else rounds
        self._lo_bits = np.uint64(bits // 2)
        self._lo_mask = np.uint64((1 << (bits // 2)) - 1)
        self._hi_mask = np.uint64((1 << (bits - bits // 2)) - 1)
        self._round_keys = [np.uint64(derive_seed(key, r)) for r in range(rounds)]
        # The high half is the larger one: a table row indexed by it also covers the low half.
        half = 1 << (bits - bits // 2)
        # Points to evaluate directly before tabulating (see _tabulate); None: never.
        self._tabulate_after = half if half <= MAX_TABLE_HALF else None
        self._evaluated = 0
        self._tables: np.ndarray | None = None

    def __call__(self, positions: np.ndarray) -> np.ndarray:
        """The images of ``positions`` (integers in ``[0, n)``, any shape) as int64."""
        x = np.asarray(positions)
        if x.size and (x.min() < 0 or x.max() >= self.n):
            raise ValueError(f"positions must lie in [0, {self.n}), got {x.min()}..{x.max()}")
        flat = x.reshape(-1)
        if self._tabulate(flat.size):
            y = self._walk(flat.astype(np.int64, copy=False), self._feistel_tabulated)
        else:
            y = self._walk(flat.astype(np.uint64), self._feistel).astype(np.int64)
        return y.reshape(x.shape)

    def _walk(self, x: np.ndarray, feistel) -> np.ndarray:
        """Cycle-walking: ``feistel`` of ``x``, applied again where the result is ``>= n``.

        Each point's walk depends on that point alone, so the images do not depend on which
        other points share the call (a block of batches gives each batch its own images).
        """
        y = feistel(x)
        walking = np.flatnonzero(y >= self.n)
        while walking.size:
            step = feistel(y[walking])
            y[walking] = step
            walking = walking[step >= self.n]
        return y

    def _tabulate(self, points: int) -> bool:
        """Whether to evaluate a call on ``points`` positions through the round tables,
        building them once the permutation has evaluated a table row's worth of points.

        A round's function reads one half only, so on small domains all of its values fit
        in a table, and a round becomes one gather and one XOR instead of the ~10 numpy
        calls of :func:`mix64` (3x faster on 8192 points of a 50,000-point domain). A table
        entry costs one mix64 and a point evaluated directly costs one a round, so building
        the tables costs about what evaluating a row's worth of points does: waiting until
        then bounds the waste at 2x on permutations used for a few points only (a short
        epoch of a huge space). Both evaluators give the same bits.
        """
        if self._tables is None and self._tabulate_after is not None:
            self._evaluated += points
            if self._evaluated >= self._tabulate_after:
                self._tables = self._round_tables()
        return self._tables is not None

    def _round_tables(self) -> np.ndarray:
        """int64 ``[rounds, 2**hi_bits]``: row ``r`` holds round ``r``'s masked mix of every
        value of the half it reads (rows of low-half rounds are longer than needed)."""
        values = np.arange(int(self._hi_mask) + 1, dtype=np.uint64)
        keys = np.array(self._round_keys, dtype=np.uint64)[:, None]
        masks = np.array([self._hi_mask if r % 2 == 0 else self._lo_mask
                          for r in range(len(self._round_keys))], dtype=np.uint64)[:, None]
        return (_mix64_array(values + keys) & masks).astype(np.int64)

    def _feistel(self, x: np.ndarray) -> np.ndarray:
        lo = x & self._lo_mask
        hi = x >> self._lo_bits
        for r, round_key in enumerate(self._round_keys):
            if r % 2 == 0:
                hi ^= _mix64_array(lo + round_key) & self._hi_mask
            else:
                lo ^= _mix64_array(hi + round_key) & self._lo_mask
        hi <<= self._lo_bits
        hi |= lo
        return hi

    def _feistel_tabulated(self, x: np.ndarray) -> np.ndarray:
        """:meth:`_feistel` of int64 ``x`` through the round tables, as int64 (the halves
        index the tables, and a tabulated domain has at most 30 bits)."""
        lo_bits = int(self._lo_bits)
        lo = x & int(self._lo_mask)
        hi = x >> lo_bits
        for r, table in enumerate(self._tables):
            if r % 2 == 0:
                hi ^= table.take(lo)
            else:
                lo ^= table.take(hi)
        hi <<= lo_bits
        hi |= lo
        return hi

    def __repr__(self) -> str:
        return f"KeyedPermutation(n={self.n}, rounds={len(self._round_keys)})"
