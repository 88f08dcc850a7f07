"""The MDE and seeds needed of factorial contrasts are at the level Holm really gives them (DESIGN 12).

The factorial family (four simple effects and the interaction per cell) is tested with Holm. An MDE
computed at alpha overstates the interaction's power when other members of the family stay
unrejected: the factorial study's interaction MDE had power 0.71, not 0.80. The report now prices
each contrast at alpha / k (k = 1 + the other members not established) and says so; `harness plan`
prices the interaction at Holm's first step, alpha / m. Checked against an independent power
computation (scipy's noncentral t) and a simulation of the whole Holm procedure (scipy's t-tests).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.optimize
import scipy.stats
from test_factorial_stats import DESIGN, LEVELS, study  # tests/ is on sys.path under pytest (no package)

from harness.design.analysis_plan import AnalysisPlan
from harness.report.stats.factorial import INTERACTION, MAIN, SIMPLE, holm_share_text, verdicts
from harness.report.stats.seed_planning import GridShape, plan_rows

POWER = 0.8


def nct_power(effect: float, sd: float, n: int, level: float) -> float:
    """Two-sided paired t power by scipy's noncentral t (independent of statsmodels)."""
    df, nc = n - 1, effect / sd * math.sqrt(n)
    q = scipy.stats.t.isf(level / 2, df)
    lower = scipy.stats.nct.cdf(-q, df, nc)  # NaN far in the tail (scipy 1.17) where it is ~0
    return float(scipy.stats.nct.sf(q, df, nc) + (0.0 if math.isnan(lower) else lower))


def nct_mde(sd: float, n: int, level: float) -> float:
    return scipy.optimize.brentq(lambda e: nct_power(e, sd, n, level) - POWER, 1e-9 * sd, 8 * sd, xtol=1e-14)


def holm_reject(p: np.ndarray, alpha: float) -> np.ndarray:
    """Holm's step-down rejections over the last axis, written out (independent of decisions.holm)."""
    m = p.shape[-1]
    order = np.argsort(p, axis=-1)
    sorted_p = np.take_along_axis(p, order, axis=-1)
    ok = np.cumprod(sorted_p < alpha / (m - np.arange(m)), axis=-1).astype(bool)
    out = np.zeros_like(ok)
    np.put_along_axis(out, order, ok, axis=-1)
    return out


# per-seed contrast weights over (y_00, y_10, y_01, y_11): simple effects and the interaction (the family)
FAMILY_WEIGHTS = np.array([[-1, 1, 0, 0], [0, 0, -1, 1], [-1, 0, 1, 0], [0, -1, 0, 1], [1, -1, -1, 1]], float)


def simulated_power(means: np.ndarray, sd_run: float, n: int, studies: int, seed: int) -> tuple[float, float]:
    """(the interaction's raw two-sided rejection rate at each level in ``levels``, its Holm rate)."""
    rng = np.random.default_rng(seed)
    y = rng.normal(0, 0.05, (studies, n, 1)) + means + rng.normal(0, sd_run, (studies, n, 4))
    d = np.einsum("snc,kc->skn", y, FAMILY_WEIGHTS)  # [studies, 5, n]
    p = scipy.stats.ttest_1samp(d, 0.0, axis=-1).pvalue
    return p, holm_reject(p, 0.05)[:, -1]


def test_harness_plan_prices_the_interaction_at_holms_first_step_and_says_so():
    plan = AnalysisPlan(min_effect_nats=0.02, factorial=DESIGN, max_seeds=40)
    shape = GridShape(
        "g", plan, 12, "block_attnres", "rd_attnres", ("param_matched",), (("s", 1, tuple(LEVELS)),)
    )
    sd_single = 0.01
    row = next(r for r in plan_rows(shape, sd=sd_single) if r.kind == "interaction")
    assert "alpha / 5" in row.comparison and row.level == pytest.approx(0.01)
    sd_inter = sd_single * math.sqrt(2)
    assert row.mde_nats == pytest.approx(nct_mde(sd_inter, 12, 0.01), rel=1e-6)
    # seeds needed: the first n whose power at alpha / 5 reaches 0.8 (scipy), not the n at alpha
    need = next(n for n in range(3, 41) if nct_power(0.02, sd_inter, n, 0.01) >= POWER)
    assert (
        row.seeds_needed
        == need
        > next(n for n in range(3, 41) if nct_power(0.02, sd_inter, n, 0.05) >= POWER)
    )
    # simulated: with the interaction at the printed MDE, its t-test at alpha / 5 rejects in ~80 % of studies,
    # and Holm over the family (the simple effects it drags along help, never hurt) in at least that many
    sd_run = sd_inter / 2  # the interaction's variance is 4 single runs'
    means = np.array([0.0, 0.0, 0.0, row.mde_nats])
    p, holm = simulated_power(means, sd_run, 12, 20_000, 1)
    se = math.sqrt(POWER * (1 - POWER) / 20_000)
    assert abs((p[:, -1] < 0.01).mean() - POWER) < 4 * se
    assert holm.mean() > POWER - 4 * se


def test_the_reports_interaction_mde_is_at_the_level_holm_gives_it():
    rng = np.random.default_rng(7)
    n, sd_run = 12, 0.01
    # offset helps a lot (its simple effects are established); decoupled_v does nothing at offset = 0
    means = np.array([0.0, -0.2, 0.0, -0.2 + 0.004])
    y = 3.5 + rng.normal(0, 0.05, (n, 1)) + means + rng.normal(0, sd_run, (n, 4))
    stats, _ = study(y, min_effect_nats=0.02)
    cell = stats.factorial[0]
    inter = cell.contrast(INTERACTION)
    family = [c for c in cell.contrasts if c.spec.kind != MAIN]
    open_others = sum(not c.established for c in family if c is not inter)
    assert open_others >= 1 and inter.holm_share == 1 + open_others
    level = 0.05 / inter.holm_share
    assert inter.mde_nats == pytest.approx(nct_mde(inter.sd, n, level), rel=1e-6)
    assert f"level alpha / {inter.holm_share}" in holm_share_text(inter)
    assert f"level alpha / {inter.holm_share}" in " ".join(verdicts(cell, stats.plan))
    # the old MDE (at alpha) has less than the plan's power under Holm; the new one has it (simulated)
    assert nct_mde(inter.sd, n, 0.05) < inter.mde_nats
    sim_means = np.array([0.0, -0.2, 0.0, -0.2 + inter.mde_nats])  # decoupled_v: 0 at offset 0, I at offset 1
    sd_sim = inter.sd / 2
    p, holm = simulated_power(sim_means, sd_sim, n, 20_000, 2)
    se = math.sqrt(POWER * (1 - POWER) / 20_000)
    assert holm.mean() > POWER - 4 * se
    old = np.array([0.0, -0.2, 0.0, -0.2 + nct_mde(inter.sd, n, 0.05)])
    _, holm_old = simulated_power(old, sd_sim, n, 20_000, 3)
    assert holm_old.mean() < POWER - 4 * se  # the overstatement the report used to print


def test_every_established_simple_effect_is_priced_at_its_holm_share():
    rng = np.random.default_rng(8)
    y = 3.5 + rng.normal(0, 0.05, (10, 1)) + np.array([0.0, -0.2, -0.2, -0.4]) + rng.normal(0, 0.01, (10, 4))
    cell = study(y, min_effect_nats=0.02)[0].factorial[0]
    family = [c for c in cell.contrasts if c.spec.kind != MAIN]
    not_est = sum(not c.established for c in family)
    for c in family:
        assert c.holm_share == 1 + not_est - (not c.established), c.spec
    assert cell.contrast(SIMPLE, 0, 0).established
