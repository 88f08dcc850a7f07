"""The compute multiplier's arithmetic (DESIGN section 14) against independent scipy computations on
hand-built parent curves: the interpolation, a censored seed, a non-monotone curve, the across-seed summary
and the verdict rule; the FLOPs count with routing against a hand count."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import interpolate, optimize
from scipy import stats as sps

from harness.models import get_spec
from harness.models.flops import routing_flops_per_token, training_flops_per_token
from harness.models.sizes import derive
from harness.report.stats.multiplier_math import multiplier_verdict, summarize_logs, tokens_to_reach

TOKENS = np.array([100_000, 200_000, 400_000, 800_000], dtype=float)
NLL = np.array([4.10, 3.85, 3.70, 3.62])


def _hermite_tokens(tokens, nll, target):
    """Fritsch-Butland monotone cubic Hermite of log-tokens against NLL, by hand (Fritsch and Carlson 1980;
    the weighted harmonic-mean interior slopes and the shape-preserving three-point end slopes)."""
    x, y = np.asarray(nll, dtype=float)[::-1], np.log(np.asarray(tokens, dtype=float))[::-1]
    h, delta = np.diff(x), np.diff(y) / np.diff(x)
    d = np.zeros_like(x)
    for k in range(1, len(x) - 1):
        if delta[k - 1] * delta[k] > 0:
            w1, w2 = 2 * h[k] + h[k - 1], h[k] + 2 * h[k - 1]
            d[k] = (w1 + w2) / (w1 / delta[k - 1] + w2 / delta[k])

    def end(h0, h1, d0, d1):
        s = ((2 * h0 + h1) * d0 - h0 * d1) / (h0 + h1)
        if np.sign(s) != np.sign(d0):
            return 0.0
        return 3 * d0 if np.sign(d0) != np.sign(d1) and abs(s) > 3 * abs(d0) else s

    if len(x) == 2:
        d[:] = delta[0]
    else:
        d[0], d[-1] = end(h[0], h[1], delta[0], delta[1]), end(h[-1], h[-2], delta[-1], delta[-2])
    k = min(int(np.searchsorted(x, target, side="right")) - 1, len(x) - 2)
    t = (target - x[k]) / h[k]
    h00, h10, h01, h11 = 2 * t**3 - 3 * t**2 + 1, t**3 - 2 * t**2 + t, -2 * t**3 + 3 * t**2, t**3 - t**2
    return math.exp(h00 * y[k] + h10 * h[k] * d[k] + h01 * y[k + 1] + h11 * h[k] * d[k + 1])


def _scipy_line_tokens(tokens, nll, target):
    """Two budgets: the root of the straight line NLL(log tokens) - target, by Brent's method."""
    curve = interpolate.interp1d(np.log(tokens), nll)
    return math.exp(
        optimize.brentq(lambda x: float(curve(x)) - target, math.log(tokens[0]), math.log(tokens[-1]))
    )


@pytest.mark.parametrize("target", [4.10, 4.0, 3.85, 3.77, 3.70, 3.6201, 3.62])
def test_the_interpolation_equals_a_hand_monotone_cubic_through_the_budgets(target):
    reach = tokens_to_reach(TOKENS, NLL, target)
    assert (reach.censored, reach.reason) == ("", "")
    assert reach.tokens == pytest.approx(_hermite_tokens(TOKENS, NLL, target), rel=1e-12)
    assert reach.extrapolated == reach.tokens
    if target in NLL:  # through every budget
        assert reach.tokens == pytest.approx(TOKENS[list(NLL).index(target)], rel=1e-12)


def test_with_two_budgets_it_is_the_straight_line_in_log_tokens():
    for target in (3.85, 3.8, 3.71):
        reach = tokens_to_reach(TOKENS[1:3], NLL[1:3], target)
        assert reach.tokens == pytest.approx(_scipy_line_tokens(TOKENS[1:3], NLL[1:3], target), rel=1e-12)


def test_the_interpolation_is_monotone_between_budgets():
    targets = np.linspace(NLL[0], NLL[-1], 200)
    needed = [tokens_to_reach(TOKENS, NLL, t).tokens for t in targets]
    assert np.all(np.diff(needed) > 0)


def test_a_variant_past_the_largest_budget_is_censored_at_the_bound_with_a_separate_extrapolation():
    reach = tokens_to_reach(TOKENS, NLL, 3.55)
    assert reach.censored == "above" and reach.tokens == 800_000 and reach.reason == ""
    slope, icpt = np.polyfit(np.log(TOKENS[-2:]), NLL[-2:], 1)  # the named model: a line through the last two
    assert reach.extrapolated == pytest.approx(math.exp((3.55 - icpt) / slope), rel=1e-10)
    assert reach.extrapolated > 800_000
    below = tokens_to_reach(TOKENS, NLL, 4.3)
    assert below.censored == "below" and below.tokens == 100_000 and below.extrapolated < 100_000


def test_a_non_monotone_or_diverged_curve_leaves_the_seed_out_with_the_reason():
    reach = tokens_to_reach(TOKENS, [4.10, 3.85, 3.90, 3.62], 3.8)
    assert math.isnan(reach.tokens) and reach.reason.startswith(
        "non-monotone parent curve (NLL 3.8500 at 200_000"
    )
    flat = tokens_to_reach(TOKENS, [4.10, 3.85, 3.85, 3.62], 3.8)
    assert "non-monotone" in flat.reason
    assert tokens_to_reach(TOKENS, [4.10, math.nan, 3.7, 3.62], 3.8).reason == "a non-finite NLL"
    with pytest.raises(ValueError, match="2 strictly increasing budgets"):
        tokens_to_reach([100_000], [4.0], 3.9)


def test_the_summary_equals_scipy_s_geometric_mean_interval_and_one_sided_p():
    m = np.array([1.31, 1.12, 1.45, 0.97, 1.26])
    s = summarize_logs(np.log(m), 0.05, 1.05)
    assert s.estimate == pytest.approx(sps.gmean(m), rel=1e-12)
    x = np.log(m)
    lo, hi = sps.t.interval(0.95, len(x) - 1, loc=x.mean(), scale=sps.sem(x))
    assert (s.ci_low, s.ci_high) == pytest.approx((math.exp(lo), math.exp(hi)), rel=1e-12)
    t_up = x.mean() / sps.sem(x)
    assert s.p_exceeds == pytest.approx(sps.t.sf(t_up, len(x) - 1), rel=1e-12)
    t_down = (x.mean() - math.log(1.05)) / sps.sem(x)
    assert s.p_below_min == pytest.approx(sps.t.cdf(t_down, len(x) - 1), rel=1e-12)


def test_the_verdict_words_and_the_censoring_rule():
    assert multiplier_verdict(5, 0.01, 0.9, 0, 0, 0.05) == "yes"
    assert (
        multiplier_verdict(5, 0.01, 0.9, 2, 0, 0.05) == "yes"
    )  # censored above: a lower bound, conservative
    assert multiplier_verdict(5, 0.01, 0.9, 0, 1, 0.05) == "undecided"  # censored below: never yes
    assert multiplier_verdict(5, 0.9, 0.01, 0, 0, 0.05) == "no"
    assert multiplier_verdict(5, 0.9, 0.01, 1, 0, 0.05) == "undecided"  # censored above: never no
    assert multiplier_verdict(2, 0.001, 0.9, 0, 0, 0.05) == "undecided"  # n < 3
    assert multiplier_verdict(5, math.nan, math.nan, 0, 0, 0.05) == "undecided"


def test_the_training_flops_add_routing_to_6n_plus_12ldt_by_hand():
    cfg = derive(
        "tiny"
    )  # L 2, D 64, T 64, block size 2: blocks [[S1 partial mlp], [S2 attn, S2p mlp, S2p out]]
    L, D, T, n = 2, 64, 64, 123_456
    base = 6 * n + 12 * L * D * T
    # per_site, rd_attnres (attention sites route QK and V: R 2; mlp and out R 1):
    # block 0: mlp over 1 + 1 sources, R 1 -> 4*2*1; block 1: attn over 2 (R 2) -> 4*2*2, mlp 3 -> 4*3, out 3 -> 4*3
    fwd = 4 * 2 * 1 + 4 * 2 * 2 + 4 * 3 * 1 + 4 * 3 * 1
    assert routing_flops_per_token(get_spec("rd_attnres"), cfg, "per_site") == 3 * fwd * D
    # two_phase: per block 4 S N + per site (4 p R + 3 R)
    two = (4 * 1 * 1 + (4 * 1 + 3)) + (4 * 2 * 4 + 3 * 2 + (4 + 3) + (4 + 3))
    assert routing_flops_per_token(get_spec("rd_attnres"), cfg, "two_phase") == 3 * two * D
    assert training_flops_per_token(get_spec("rd_attnres"), cfg, n) == base + 3 * two * D
    assert training_flops_per_token(get_spec("prenorm"), cfg, n) == base  # no routing


def test_plan_lines_price_the_extra_budgets_and_the_seeds_from_a_pilot_s_spread():
    from statsmodels.stats.power import TTestPower

    from harness.design.analysis_plan import AnalysisPlan
    from harness.report.stats.multiplier import MultiplierRow, MultiplierStats, extra_budget_lines
    from harness.report.stats.seed_planning import Throughput

    row = MultiplierRow(
        *("rd_attnres - block_attnres", "rd_attnres", "compute", "mini", 614_400, 5, "0 1 2 3 4", 0, 0),
        *(1.1, 1.0, 1.2, 0.04, 0.04, 0.5, 0.5, "undecided", None, 1.1, "", 0.95, 0.08, ""),
    )
    plan = AnalysisPlan(max_seeds=60)
    lines = extra_budget_lines(
        (("mini", 614_400, ("block_attnres", "rd_attnres")),),
        5,
        "block_attnres",
        {"mini": Throughput(1000.0, "test")},
        MultiplierStats(rows=(row,)),
        plan,
    )
    tokens = 5 * (307_200 + 1_228_800)
    assert lines[0].endswith(f"10 runs, {tokens:_} tokens, {tokens / 1000 / 3600:.2f} worker-hours")
    power = TTestPower()
    n = next(
        k
        for k in range(3, 61)
        if power.power(math.log(1.05) / 0.08, nobs=k, alpha=0.05, alternative="larger") >= 0.8
    )
    assert lines[1].endswith(f"sd of log multipliers 0.08: {n}")
