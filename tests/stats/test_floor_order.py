"""No verdict depends on the order of the seeds at the numerical floor (DESIGN section 6).

One variant diverged at half of the seeds and every observed difference is exactly 0: each lost
seed counts with the imputed 2e-6, so the exact mean of the tested values is the floor itself
(no verdict). ``np.mean`` of those values is 1.0000000000000002e-06 when the lost seeds come last
and 1e-06 when they come first, so the float mean gave a headline, a control and an interaction
verdict that the same seeds in another order did not. Each case is checked against the exact
comparison ``|sum d| > n * floor`` in rationals (:class:`fractions.Fraction`).
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from test_factorial_stats import COMBO, study  # tests/ is on sys.path under pytest (no package)

from harness.design.analysis_plan import AnalysisPlan
from harness.report.simulation.synthetic import frames_from_values
from harness.report.stats.analysis import analyze
from harness.report.stats.factorial import INTERACTION, SIMPLE
from harness.report.stats.floors import FLOOR_NATS, IMPUTED_NATS, beyond_floor, verdict_mean

NS = (20, 22, 26, 28, 30)
ORDERS = ("first", "last", "interleaved")
R_FLOOR = "mean within the numerical floor"


def lost_positions(n: int, order: str) -> np.ndarray:
    """``[n]`` bool: the half of the seeds lost to divergence, placed first, last or every other one."""
    pos = np.arange(n)
    return {"first": pos < n // 2, "last": pos >= n - n // 2, "interleaved": pos % 2 == 1}[order]


def exactly_beyond(values) -> bool:
    """The independent comparison: ``|sum d| > n * floor`` over the rationals."""
    total = sum((Fraction(v) for v in values), Fraction(0))
    return abs(total) > len(values) * Fraction(FLOOR_NATS)


def test_the_float_mean_depends_on_the_order_and_the_verdict_mean_does_not():
    flips = 0
    for n in NS:
        for order in ORDERS:
            d = np.where(lost_positions(n, order), IMPUTED_NATS, 0.0)
            assert not exactly_beyond(d)  # the exact mean is the floor itself
            flips += bool(beyond_floor(np.mean(d)))  # the old comparison
            assert verdict_mean(d) == FLOOR_NATS and not beyond_floor(verdict_mean(d)), (n, order)
            assert not beyond_floor(verdict_mean(-d)) and not verdict_mean(-d) < -FLOOR_NATS
    assert flips > 0  # np.mean crossed the floor for some order: the test would fail on the old code


def test_the_verdict_mean_is_exact_one_rational_ulp_beyond_the_floor():
    rng = np.random.default_rng(3)
    for n in NS:
        d = np.where(lost_positions(n, "last"), IMPUTED_NATS, 0.0)
        d[0] += 5e-324  # exact mean beyond the floor by far less than one ulp of it
        for perm in (np.arange(n), rng.permutation(n), np.arange(n)[::-1]):
            x = d[perm]
            assert exactly_beyond(x) and beyond_floor(verdict_mean(x)), n
            assert verdict_mean(-x) < -FLOOR_NATS
        # over thousands of rows at once the same as row by row (the vectorised path)
        rows = np.stack([d[rng.permutation(n)] for _ in range(50)] + [np.roll(d, k) * 0 for k in range(3)])
        got = beyond_floor(verdict_mean(rows))
        assert got.tolist() == [exactly_beyond(r) for r in rows]


def _headline(n: int, order: str):
    """The parent diverged at half of the seeds; the treatment equals it exactly at the others."""
    lost = lost_positions(n, order)
    parent = [math.nan if x else 3.5 + k / 64 for k, x in enumerate(lost)]
    treat = [3.5 + k / 64 for k in range(n)]
    fr = frames_from_values({"block_attnres": parent, "rd_attnres": treat})
    return analyze(fr["final"], fr["runs"], plan=AnalysisPlan()).headlines[0]


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("n", NS)
def test_a_headline_at_the_floor_is_undecided_whatever_the_order(n, order):
    h = _headline(n, order)
    assert len(h.imputed) == n // 2
    tested = [-IMPUTED_NATS if x else 0.0 for x in lost_positions(n, order)]
    assert not exactly_beyond(tested)
    assert h.verdict == "undecided" and h.reason == R_FLOOR, (n, order, h.verdict, h.reason)
    assert h.holm_p < 0.05  # the test alone would establish it: only the floor keeps the verdict


def _control(n: int, order: str):
    """The gain is established at zero spread; the control diverged at half of the seeds and lies
    exactly halfway (rho = 0.5) at the others: reproduction contrast e = 0 observed, +2e-6 imputed."""
    lost = lost_positions(n, order)
    fr = frames_from_values(
        {
            "block_attnres": [3.5] * n,
            "rd_attnres": [3.25] * n,
            "fixed_v": [math.nan if x else 3.375 for x in lost],
        }
    )
    return analyze(fr["final"], fr["runs"], plan=AnalysisPlan()).assessments[0]


# a degenerate mixed-model fit here has a NaN SE: printed as such, numpy's sqrt warning not passed on
@pytest.mark.filterwarnings("error::RuntimeWarning")
@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("n", NS)
def test_a_control_contrast_at_the_floor_is_inconclusive_whatever_the_order(n, order):
    a = _control(n, order)
    assert len(a.imputed) == n // 2 and a.holm_p < 0.05
    assert not exactly_beyond([IMPUTED_NATS if x else 0.0 for x in lost_positions(n, order)])
    assert a.verdict == "inconclusive" and a.reason == R_FLOOR, (n, order, a.verdict, a.reason)


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("n", NS)
def test_an_interaction_at_the_floor_is_not_established_whatever_the_order(n, order):
    y = np.full((n, 4), 3.5)
    y[lost_positions(n, order), 3] = math.nan  # rd_offset (both factors) diverged at half of the seeds
    assert COMBO["rd_offset"] == (1, 1)
    cell = study(y)[0].factorial[0]
    for c in (cell.contrast(INTERACTION), cell.contrast(SIMPLE, 0, 1), cell.contrast(SIMPLE, 1, 1)):
        assert len(c.imputed) == n // 2 and c.holm_p < 0.05, c.spec
        assert not exactly_beyond([IMPUTED_NATS if x else 0.0 for x in lost_positions(n, order)])
        assert not c.established and c.reason == R_FLOOR, (n, order, c.spec, c.reason)
