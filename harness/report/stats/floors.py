"""The numerical floor: no verdict rests on differences float rounding can make (DESIGN section 6).

Final validation NLLs are float32 sums stored as float64; a difference of two of them near
3.5 nats/token can be 1 ulp of float64 (4.4e-16) or 1 ulp of float32 (2.4e-7) without
any real effect. Statistics of such differences are pure rounding: five differences of
-1 ulp have a one-sided t p of 0.002 and an exact sign-flip p of 1/32. So:

* :data:`FLOOR_NATS` (1e-6 nats/token) is the absolute floor of every verdict that rests on
  a mean: a headline or reproduction contrast whose |mean| is within it is ``undecided`` /
  ``inconclusive``; a control within it of the parent at every seed is ``invalid:
  degenerate``.
* :func:`aa_floor` is the A/A check's floor: the float32 rounding of the NLL itself (one
  float32 ulp at the largest |NLL| of the pairs, e.g. 2.4e-7 at 3.5), because an A/A
  offset is judged against bit-level agreement; an A/A mean offset within it is ``pass``.
* :data:`IMPUTED_NATS` (2e-6 nats/token, twice the floor) is the least |d| a seed lost to divergence
  counts with (:mod:`harness.report.stats.divergence`): strictly beyond the floor, so a comparison whose
  every pair is imputed has a mean beyond the floor at every n. At exactly the floor the float mean
  of n equal values lands on either side of it by rounding (12 values of 1e-6 average to
  1.0000000000000002e-06, 8 to 1e-06), and a verdict would flip with n.
* :func:`verdict_mean` is the mean every verdict compares with the floor: the exact mean of the values
  (rational arithmetic), as a float on the same side of +-floor as the exact value. ``np.mean`` rounds
  by summation order: 10 imputed values of 2e-6 and 10 zeros average to 1e-06 when the zeros come last
  but to 1.0000000000000002e-06 when they come first, and a verdict would then depend on the order of the
  seeds; the exact comparison is ``|sum d| > n * floor``.
* :data:`ZERO_SPREAD_NATS`: differences whose max - min is within it have zero spread (an
  absolute tolerance; a relative one calls last-bit noise on tiny differences spread).

The floor is fixed, not a plan key: a new ``[analysis]`` key would make every plan
stored with existing runs differ from the re-read one (harness.design.analysis_plan.plan_diff).
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

FLOOR_NATS = 1e-6  # nats/token: absolute numerical floor of every verdict (DESIGN 6)
ZERO_SPREAD_NATS = FLOOR_NATS  # spread within the floor is no spread
IMPUTED_NATS = (
    2 * FLOOR_NATS
)  # least |d| of a seed lost to divergence: never on the floor (a verdict must not flip with n)


def aa_floor(nll) -> float:
    """The A/A floor in nats/token: one float32 ulp at the largest |NLL| of ``nll`` (any shape).

    ``np.spacing(np.float32(3.5))`` = 2.38e-7: two NLLs closer than this can be the same float32
    number. 0 for no values.

    Raises:
        ValueError: a non-finite NLL.
    """
    x = np.abs(np.asarray(nll, dtype=float)).ravel()
    if not x.size:
        return 0.0
    if not np.all(np.isfinite(x)):
        raise ValueError(f"NLL values must be finite for the A/A floor, got {x[~np.isfinite(x)].tolist()}")
    return float(np.spacing(np.float32(x.max())))


def beyond_floor(mean, floor: float = FLOOR_NATS) -> np.ndarray:
    """``[...]`` bool: ``|mean|`` exceeds ``floor`` (NaN: False). Elementwise over ``mean``."""
    with np.errstate(invalid="ignore"):
        return np.abs(np.asarray(mean, dtype=float)) > floor


def within_floor_everywhere(d, floor: float = FLOOR_NATS) -> bool:
    """Every value of 1-D ``d`` is within ``floor`` of 0 (False when ``d`` is empty)."""
    d = np.asarray(d, dtype=float)
    return bool(d.size) and bool(np.all(np.abs(d) <= floor))


def _exact_side(values: np.ndarray, floor: float) -> tuple[int, int]:
    """Signs of ``sum - n * floor`` and ``sum + n * floor`` for 1-D finite ``values``, in rationals."""
    total, bound = sum(map(Fraction, values.tolist()), Fraction(0)), len(values) * Fraction(floor)
    hi, lo = total - bound, total + bound
    return (hi > 0) - (hi < 0), (lo > 0) - (lo < 0)


def verdict_mean(d, floor: float = FLOOR_NATS) -> np.ndarray | float:
    """Mean of ``d`` ``[..., n]`` over the last axis (nats/token), exact where it meets ``floor``.

    The float mean, except where it lies near +-``floor`` (within 1e-9 of it relative, or within the
    summation's rounding bound): there the exact mean (rational sum of the float values, compared as
    ``sum d`` against ``n * floor``) decides which side of +-floor it is, and the float returned is the
    correctly rounded exact mean, moved by one ulp where rounding would carry it onto or across the floor.
    So ``beyond_floor(verdict_mean(d))`` and ``verdict_mean(d) < -floor`` are the exact comparisons
    (DESIGN section 6: no verdict from rounding) and do not depend on the order of the seeds.
    NaN values give a NaN mean; an empty last axis gives NaN.

    Returns:
        ``[...]`` means (a Python float for 1-D ``d``).
    """
    d = np.asarray(d, dtype=float)
    n = d.shape[-1]
    if n == 0:
        out = np.full(d.shape[:-1], np.nan)
        return float(out) if out.ndim == 0 else out
    mean = d.mean(axis=-1)
    with np.errstate(invalid="ignore"):
        # np.mean's error is at most ~n ulp of the largest |d|; beyond that band the float side is right.
        band = 1e-9 * floor + 4 * n * np.finfo(float).eps * np.abs(d).max(axis=-1)
        near = np.isfinite(mean) & (np.abs(np.abs(mean) - floor) <= band)
    mean = np.array(mean, dtype=float, copy=True)
    flat, rows = mean.reshape(-1), d.reshape(-1, n)
    for i in np.flatnonzero(near.reshape(-1)):
        values = rows[i]
        exact = sum(map(Fraction, values.tolist()), Fraction(0)) / n
        m = float(exact)  # correctly rounded
        hi, lo = _exact_side(values, floor)
        if hi > 0 and m <= floor:
            m = math.nextafter(floor, math.inf)
        elif hi <= 0 and m > floor:
            m = floor
        if lo < 0 and m >= -floor:
            m = math.nextafter(-floor, -math.inf)
        elif lo >= 0 and m < -floor:
            m = -floor
        flat[i] = m
    return float(mean) if mean.ndim == 0 else mean
