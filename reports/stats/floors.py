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
  counts with (:mod:`reports.stats.divergence`): strictly beyond the floor, so a comparison whose
  every pair is imputed has a mean beyond the floor at every n. At exactly the floor the float mean
  of n equal values lands on either side of it by rounding (12 values of 1e-6 average to
  1.0000000000000002e-06, 8 to 1e-06), and a verdict would flip with n.
* :data:`ZERO_SPREAD_NATS`: differences whose max - min is within it have zero spread (an
  absolute tolerance; a relative one calls last-bit noise on tiny differences spread).

The floor is fixed, not a plan key: a new ``[analysis]`` key would make every plan
stored with existing runs differ from the re-read one (harness.design.analysis_plan.plan_diff).
"""

from __future__ import annotations

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
