"""Paired ratios of the benchmark and their 95 % intervals; goals judged against the interval.

Every benchmark ratio is paired by round: round ``r`` of the interleaved timing runs one
step of every arm, and gives one ratio ``t_a[r] / t_b[r]`` (step-time ratios; a
throughput ratio is ``t_b[r] / t_a[r]``). Drift of a shared machine moves both steps of a
round alike, so the per-round ratios are far less noisy than the step times.

The estimate is the median of the per-round ratios, and its 95 % interval the
distribution-free order-statistic interval for a median (e.g. Conover 1999, *Practical
Nonparametric Statistics*, section 3.2): with ``n`` ratios sorted, ``[x_(k), x_(n+1-k)]``
with the largest ``k`` such that ``P(Bin(n, 1/2) <= k - 1) <= 0.025``; its coverage
``1 - 2 P(Bin(n, 1/2) <= k - 1)`` is at least 95 % whatever the distribution of the ratios
(stalls of a busy machine included), provided the rounds are exchangeable. It needs
``n >= 6``; below that there is no interval (``None``).

A goal ``ratio <= bound`` is *met* when the whole interval is at or below the bound,
*not met* when the whole interval is above it, *undecided* otherwise (and without an
interval); ``>=`` goals mirror this.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

LEVEL = 0.95
MIN_ROUNDS = 6  # the smallest n whose order-statistic interval reaches 95 % coverage


def half_binom_cdf(k: int, n: int) -> float:
    """``P(Bin(n, 1/2) <= k)``, exact: ``sum(C(n, i) for i <= k) / 2**n`` in integers, one rounding.

    In the standard library rather than scipy, so that ``harness bench`` imports no statistics
    package (DESIGN section 11: a GPU node's bench runs without scipy).
    """
    return sum(math.comb(n, i) for i in range(k + 1)) / 2**n


def paired_ratios(num: Sequence[float], den: Sequence[float]) -> list[float]:
    """``num[r] / den[r]`` for every round ``r`` (equal lengths; times in any one unit).

    Raises:
        ValueError: different lengths, or a non-positive time.
    """
    if len(num) != len(den):
        raise ValueError(
            f"paired ratios need as many numerator as denominator rounds ({len(num)} != {len(den)})"
        )
    if any(not (t > 0) for t in (*num, *den)):
        raise ValueError("paired ratios need positive times")
    return [a / b for a, b in zip(num, den)]


def median_rank(n: int, level: float = LEVEL) -> int | None:
    """The 1-based rank ``k`` of the interval's lower end for ``n`` values, or ``None`` (n too small)."""
    alpha = 1 - level
    k = 0
    while k + 1 <= n // 2 and half_binom_cdf(k, n) <= alpha / 2:  # P(Bin <= (k+1) - 1)
        k += 1
    return k or None


def median_interval(values: Sequence[float], level: float = LEVEL) -> tuple[float, float] | None:
    """Distribution-free ``level`` interval for the median of ``values`` (module docstring),
    ``None`` for fewer than :data:`MIN_ROUNDS` values at 95 %."""
    k = median_rank(len(values), level)
    if k is None:
        return None
    xs = sorted(values)
    return xs[k - 1], xs[len(xs) - k]


def coverage(n: int, level: float = LEVEL) -> float:
    """Exact coverage of :func:`median_interval` for ``n`` values (NaN without an interval)."""
    k = median_rank(n, level)
    return float("nan") if k is None else float(1 - 2 * half_binom_cdf(k - 1, n))


def relative_width(values: Sequence[float], interval: tuple[float, float] | None) -> float:
    """Interval width over the median (``inf`` without an interval)."""
    if interval is None:
        return math.inf
    return (interval[1] - interval[0]) / statistics.median(values)


def judge(interval: tuple[float, float] | None, op: str, bound: float) -> str:
    """``met``, ``not met`` or ``undecided`` for the goal ``ratio <op> bound`` (module docstring)."""
    if interval is None:
        return "undecided"
    low, high = interval
    if op == "<=":
        return "met" if high <= bound else "not met" if low > bound else "undecided"
    if op == ">=":
        return "met" if low >= bound else "not met" if high < bound else "undecided"
    raise ValueError(f"op={op!r}; allowed: '<=', '>='")


__all__ = [
    "LEVEL",
    "MIN_ROUNDS",
    "half_binom_cdf",
    "paired_ratios",
    "median_rank",
    "median_interval",
    "coverage",
    "relative_width",
    "judge",
]
