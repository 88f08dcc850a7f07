"""Sequential looks (harness/report/stats/looks.py, DESIGN section 8): the O'Brien-Fleming-type Lan-DeMets
spending, which look a cell is at, the sequential p, and how the report reads a plan with looks.
CPU only, a few seconds:

    python -m pytest -q tests/stats/test_looks.py
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.stats

from harness.design.analysis_plan import LOOKS_MAX_ALPHA as GAMMA_MAX
from harness.design.analysis_plan import AnalysisPlan, parse_plan
from harness.report.simulation.synthetic import frames_from_values
from harness.report.stats import decisions as dec
from harness.report.stats.analysis import analyze
from harness.report.stats.looks import at_looks, increments, look_at, sequential_p, spent
from harness.report.stats.power import look_mde, mde, planned_seeds, power_at, seeds_needed

ALPHA = 0.05


def _obf(alpha: float, t: float) -> float:
    """Independent evaluation of 2 - 2 Phi(z_{1-alpha/2} / sqrt(t)) with scipy's cdf and ppf."""
    return 2.0 - 2.0 * scipy.stats.norm.cdf(scipy.stats.norm.ppf(1 - alpha / 2) / math.sqrt(t))


def test_spending_is_scipy_stats_norms_sf_and_isf_bit_for_bit():
    """``spent`` calls scipy.special's ndtr and ndtri directly: the very values of ``scipy.stats.norm``'s
    sf and isf, over levels down to 1e-300 and every information fraction, edges included."""
    rng = np.random.default_rng(0)
    alpha = np.concatenate([np.exp(rng.uniform(np.log(1e-300), 0.0, 2000)), [1e-300, 0.05, 0.317, 1.0, 2.0]])
    t = np.concatenate([rng.uniform(0.0, 1.0, 200), [0.0, 1e-12, 0.5, 1.0]])
    z = scipy.stats.norm.isf(alpha[:, None] / 2)
    with np.errstate(divide="ignore"):
        expected = np.where(t > 0, 2 * scipy.stats.norm.sf(z / np.sqrt(np.where(t > 0, t, 1.0))), 0.0)
    assert np.array_equal(spent(alpha[:, None], t), expected)
    assert spent(0.05, 0.3) == float(2 * scipy.stats.norm.sf(scipy.stats.norm.isf(0.025) / math.sqrt(0.3)))


def test_spending_function_values():
    for t in (0.1, 0.3, 0.5, 0.8, 1.0):
        assert spent(ALPHA, t) == pytest.approx(_obf(ALPHA, t), rel=1e-9)
    assert spent(ALPHA, 1.0) == pytest.approx(ALPHA, rel=1e-12) and spent(ALPHA, 0.0) == 0.0
    # Published O'Brien-Fleming-type Lan-DeMets values at alpha 0.05: 0.0056 spent by half the information.
    assert spent(ALPHA, 0.5) == pytest.approx(0.00557, abs=5e-5)
    inc = increments(ALPHA, (3, 5, 10))
    assert inc == pytest.approx(
        [_obf(ALPHA, 0.3), _obf(ALPHA, 0.5) - _obf(ALPHA, 0.3), ALPHA - _obf(ALPHA, 0.5)], rel=1e-9
    )
    assert inc.sum() == pytest.approx(ALPHA, abs=1e-15)
    assert inc == pytest.approx([0.000346, 0.005229, 0.044425], abs=1e-6)


def test_increments_grow_with_the_level_below_gamma_max():
    """The sequential-p shortcut needs Delta_i(gamma) increasing in gamma: true while z_{1-gamma/2} > 1."""
    assert GAMMA_MAX == pytest.approx(2 * scipy.stats.norm.sf(1.0), abs=1e-15)
    gammas = np.linspace(1e-6, GAMMA_MAX, 4001)
    for looks in ((3, 5, 10), (3, 4), (3, 30), (3, 4, 5, 6, 7, 8, 9, 10), (10, 11, 12, 30)):
        assert (np.diff(increments(gammas, looks), axis=0) > 0).all(), looks


def test_which_look_a_cell_is_at():
    lk = look_at(4, (3, 5, 10), ALPHA)  # between looks: the largest look <= n, on its own pairs
    assert (lk.k, lk.n_looks, lk.n, lk.next_n, lk.pairs) == (1, 3, 3, 5, 4)
    assert lk.level == pytest.approx(increments(ALPHA, (3, 5, 10))[0])
    lk = look_at(2, (3, 5, 10), ALPHA)  # before the first look: nothing tested
    assert lk.before_first and (lk.k, lk.n, lk.next_n) == (0, 0, 3) and math.isnan(lk.level)
    lk = look_at(12, (3, 5, 10), ALPHA)  # past the last look: the last look, on its 10 pairs
    assert lk.last and (lk.k, lk.n, lk.next_n) == (3, 10, None)
    lk = look_at(5, (), ALPHA)  # no looks: all pairs at alpha
    assert not lk.planned and (lk.n, lk.level, lk.next_n) == (5, ALPHA, None)


def test_sequential_p_is_the_smallest_rejecting_level():
    rng = np.random.default_rng(0)
    looks = (3, 5, 10)
    p = 10 ** rng.uniform(-6, 0, size=(3000, 3))
    p[::7, 2] = np.nan  # last look not reached
    p[::11, 1:] = np.nan  # only the first look
    seq, deciding = sequential_p(p, looks)
    for a in (0.001, 0.01, 0.05, 0.2):
        reject = np.nan_to_num(p < increments(a, looks), nan=False).any(axis=-1)
        near = np.abs(seq - a) < 1e-9  # exactly on the boundary: either answer
        assert ((seq < a) == reject)[~near].all(), a
    assert (seq <= 1).all() and (seq > 0).all()
    assert np.isin(deciding, [0, 1, 2]).all()
    # One look at the full information: the sequential p is the p itself.
    q = np.array([[1e-5], [0.01], [0.04], [0.3]])
    assert sequential_p(q, (10,))[0] == pytest.approx(q[:, 0], rel=1e-12)
    # above GAMMA_MAX too: the exact value (it decides nothing), never a silent 1
    assert sequential_p(np.array([[0.9]]), (10,))[0][0] == pytest.approx(0.9, rel=1e-12)
    s, i = sequential_p(np.full((2, 3), np.nan), looks)
    assert np.isnan(s).all() and (i == -1).all()


def test_at_looks_uses_the_first_pairs_of_each_look():
    d = np.array([-3.0, -1.0, -2.0, 1.0, -4.0, 2.0]) * 1e-3
    p, mean = at_looks(d, (3, 5, 10), dec.headline_p)
    assert p[0] == pytest.approx(scipy.stats.ttest_1samp(d[:3], 0, alternative="less").pvalue, rel=1e-12)
    assert p[1] == pytest.approx(scipy.stats.ttest_1samp(d[:5], 0, alternative="less").pvalue, rel=1e-12)
    assert math.isnan(p[2]) and mean[:2] == pytest.approx([d[:3].mean(), d[:5].mean()])


def test_a_plan_with_looks_needs_alpha_below_gamma_max():
    with pytest.raises(ValueError, match=r"analysis.alpha: 0.4 is too large for sequential looks"):
        parse_plan({"alpha": 0.4, "looks": [3, 5]})
    assert parse_plan({"alpha": 0.4}).alpha == 0.4  # without looks it stays allowed
    assert parse_plan({"alpha": 0.3, "looks": [3, 5]}).looks == (3, 5)


def test_mde_and_seeds_needed_at_the_looks():
    plan = AnalysisPlan(min_effect_nats=0.01, looks=(3, 5, 10))
    levels = increments(ALPHA, plan.looks)
    # The MDE of a cell with 7 pairs is that of look 2: 5 pairs at the look's level.
    assert look_mde(0.006, 7, plan, "one-sided") == pytest.approx(mde(0.006, 5, levels[1], 0.8, "one-sided"))
    assert math.isnan(look_mde(0.006, 2, plan, "one-sided"))
    assert look_mde(0.006, 7, AnalysisPlan(), "one-sided") == mde(0.006, 7, ALPHA, 0.8, "one-sided")
    s = planned_seeds(0.01, 0.006, plan, "one-sided")
    powers = [power_at(0.01, 0.006, n, lv, "one-sided") for n, lv in zip(plan.looks, levels)]
    want = next(n for n, pw in zip(plan.looks, powers) if pw >= 0.8)
    assert s.at_looks and s.reachable and s.n == want == 10 and s.max_seeds == 10
    assert powers[1] < 0.8 <= powers[2]
    s = planned_seeds(0.01, 0.02, plan, "one-sided")  # too noisy for any look
    assert not s.reachable and s.n is None and s.power_at_max == pytest.approx(powers_at(0.01, 0.02, plan))
    assert planned_seeds(0.01, 0.006, AnalysisPlan(min_effect_nats=0.01), "one-sided") == seeds_needed(
        0.01, 0.006, ALPHA, 0.8, "one-sided", 30
    )


def powers_at(effect, sd, plan):
    return power_at(effect, sd, plan.looks[-1], increments(plan.alpha, plan.looks)[-1], "one-sided")


def _frames(d_tp, d_cp=None):
    parent = [3.5 + 0.01 * i for i in range(len(d_tp))]
    values = {"block_attnres": parent, "rd_attnres": [p + d for p, d in zip(parent, d_tp)]}
    if d_cp is not None:
        values["fixed_v"] = [p + d for p, d in zip(parent, d_cp)]
    return frames_from_values(values)


def test_the_report_tests_the_look_not_every_pair():
    d = [-0.010, -0.004, -0.007, -0.001]  # 4 pairs: look 1 of [3, 5, 10] tests the first 3
    f = _frames(d)
    st = analyze(f["final"], f["runs"], plan=AnalysisPlan(looks=(3, 5, 10)))
    h = st.headlines[0]
    assert (h.n, h.look.k, h.look.n) == (4, 1, 3)
    assert h.p_one_sided == pytest.approx(
        scipy.stats.ttest_1samp(d[:3], 0, alternative="less").pvalue, rel=1e-12
    )
    assert h.level == pytest.approx(increments(ALPHA, (3, 5, 10))[0])
    assert not h.established  # p ~ 0.03 at 3 pairs is far above the first look's 0.00035
    row = st.to_frame().filter(st.to_frame()["comparison"] == "rd_attnres - block_attnres").row(0, named=True)
    assert row["level"] == pytest.approx(h.level) and row["look"] == 1 and row["look_pairs"] == 3
    assert "look 1 of 3 tests the first 3 of 4 pairs" in row["note"]
    # Without looks the same pairs are read once at alpha: established.
    h0 = analyze(f["final"], f["runs"], plan=AnalysisPlan()).headlines[0]
    assert (
        h0.established
        and h0.level == ALPHA
        and h0.p_one_sided
        == pytest.approx(scipy.stats.ttest_1samp(d, 0, alternative="less").pvalue, rel=1e-12)
    )


def test_before_the_first_look_nothing_is_tested():
    f = _frames([-0.02, -0.021, -0.019, -0.02], [-0.01, -0.011, -0.009, -0.01])
    st = analyze(f["final"], f["runs"], plan=AnalysisPlan(looks=(5, 10)))
    h = st.headlines[0]
    assert h.look.before_first and h.reason == "before the first look" and not h.established
    assert math.isnan(h.p_one_sided) and math.isnan(h.holm_p) and math.isnan(h.mde_nats)
    assert st.assessments[0].verdict == dec.NOT_ASSESSED
    row = st.to_frame().row(0, named=True)
    assert "before the first look (5 pairs): not tested yet" in row["note"]


def test_an_established_gain_stands_when_later_seeds_disagree():
    """Established at look 1 of [3, 6]; the three seeds added for the controls point the other way:
    the headline stays established (the sequential p only falls), the control is read at look 2."""
    d = [-0.0100, -0.0110, -0.0105, 0.0100, 0.0100, 0.0120]
    looks = (3, 6)
    f3, f6 = _frames(d[:3]), _frames(d)
    h3 = analyze(f3["final"], f3["runs"], plan=AnalysisPlan(looks=looks)).headlines[0]
    assert h3.established and h3.p_one_sided < increments(ALPHA, looks)[0]
    st = analyze(f6["final"], f6["runs"], plan=AnalysisPlan(looks=looks))
    h6 = st.headlines[0]
    assert h6.established and (h6.look.k, h6.decided_look) == (2, 1) and h6.p_one_sided > 0.3
    assert h6.sequential_p == pytest.approx(h3.sequential_p, rel=1e-12)
    assert "established at look 1 of 2" in st.to_frame().row(0, named=True)["note"]


def test_controls_spend_their_alpha_over_the_looks():
    """A contrast with p between its look's level and alpha: decided without looks, inconclusive with."""
    rng = np.random.default_rng(3)
    d_tp = -0.02 + rng.normal(0, 0.001, 10)
    z = rng.normal(0, 1, 10)
    z = (z - z.mean()) / z.std(ddof=1)
    e = 0.004 * (z + scipy.stats.t.isf(0.047 / 2, 9) / math.sqrt(10))  # two-sided t p of e: exactly 0.047
    f = _frames(list(d_tp), list(e + 0.5 * d_tp))  # e = (c - p) - rho (t - p), rho 0.5
    plain = analyze(f["final"], f["runs"], plan=AnalysisPlan())
    seq = analyze(f["final"], f["runs"], plan=AnalysisPlan(looks=(3, 5, 10)))
    a0, a1 = plain.assessments[0], seq.assessments[0]
    assert seq.headlines[0].established and plain.headlines[0].established
    assert increments(ALPHA, (3, 5, 10))[-1] < a0.contrast_p < ALPHA, a0.contrast_p
    assert a0.verdict == dec.DOES_NOT_REPRODUCE and a1.verdict == dec.INCONCLUSIVE
    assert a1.contrast_p == pytest.approx(a0.contrast_p, rel=1e-12)  # the last look tests all 10 seeds
    assert a1.look.level == pytest.approx(increments(ALPHA, (3, 5, 10))[-1])
