"""Simulation tests of DESIGN section 6 through the report's own decision functions.

Seeded; tolerances from the binomial standard error of each rate. The studies run
through reports.stats.decisions exactly as reports.stats.analysis calls it (reports/simulate.py), and
one small batch is also pushed through the full analyze() path to show the two agree.
The expected rates come from an independent power computation (statsmodels TTestPower,
noncentral t). Sequential looks (DESIGN 8) run through reports.stats.looks the same way. CPU only, ~10 s:

    python -m pytest -q tests/test_simulate.py
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from statsmodels.stats.power import TTestPower

from harness.analysis_plan import AnalysisPlan
from reports.simulate import (
    FRACTIONS,
    GAIN,
    NOISE_SD,
    binomial_se,
    established_by_look,
    headline_false_positive_rate,
    main,
    sequential_null,
    sequential_verdicts,
    verdict_rates,
)
from reports.stats import decisions as dec
from reports.stats.analysis import analyze
from reports.stats.looks import increments
from reports.synthetic import frames_from_values

ALPHA, RHO = 0.05, 0.5
STUDIES = 4000  # binomial SE at alpha: 0.0034, so +-2 percentage points is ~6 SE


@pytest.mark.parametrize("n", [3, 5, 10])
def test_headline_false_positive_rate_is_alpha(n):
    rng = np.random.default_rng(1000 + n)
    rate = headline_false_positive_rate(n, STUDIES, rng, alpha=ALPHA)
    se = binomial_se(ALPHA, STUDIES)
    assert abs(rate - ALPHA) <= 0.02  # DESIGN 6
    assert abs(rate - ALPHA) <= 4 * se, (n, rate, se)  # the one-sided t-test is exact under a normal null


def test_holm_over_cells_keeps_the_family_wise_rate():
    rng = np.random.default_rng(7)
    rate = headline_false_positive_rate(5, STUDIES, rng, alpha=ALPHA, cells=3)
    # Holm over 3 independent null cells: FWER = 1 - (1 - alpha/3)^3 = 0.0492 <= alpha.
    want = 1 - (1 - ALPHA / 3) ** 3
    assert abs(rate - want) <= 4 * binomial_se(want, STUDIES)


def _power(effect_size: float, n: int, alpha: float, alternative: str) -> float:
    return float(TTestPower().power(effect_size=effect_size, nobs=n, alpha=alpha, alternative=alternative))


@pytest.mark.parametrize("n", [3, 5, 10])
def test_verdict_rates_with_a_planted_gain(n):
    rng = np.random.default_rng(2000 + n)
    vr = verdict_rates(n, STUDIES, rng, alpha=ALPHA, rho=RHO)
    tol = lambda r: 4 * max(binomial_se(r, STUDIES), 1 / STUDIES)  # noqa: E731
    # Step 1: the gain is established exactly when the one-sided t-test rejects (one cell).
    p_est = _power(abs(GAIN) / (NOISE_SD * math.sqrt(2)), n, ALPHA, "larger")
    assert abs(vr.established - p_est) <= tol(p_est)
    sd_e = NOISE_SD * math.sqrt(1 + (1 - RHO) ** 2 + RHO**2)  # e = c - (1 - rho) p - rho t, independent runs
    for f in FRACTIONS:
        v = vr.verdicts[f]
        assert sum(v.values()) == pytest.approx(1.0)
        assert v[dec.NOT_ASSESSED] == pytest.approx(1 - vr.established, abs=1e-12)  # no gain, no verdict
        assert v[dec.DEGENERATE] == 0.0
        # The false definite verdict stays below alpha (DESIGN 6).
        assert vr.wrong_definite(f, RHO) < ALPHA
        # The right definite verdict: between the Bonferroni lower bound (established and the contrast
        # significant at alpha / 3, which implies Holm-significant) and the unadjusted power.
        right = dec.DOES_NOT_REPRODUCE if f < RHO else dec.REPRODUCES
        es = abs(f - RHO) * abs(GAIN) / sd_e
        upper = min(vr.established, _power(es, n, ALPHA, "two-sided"))
        lower = max(0.0, vr.established + _power(es, n, ALPHA / len(FRACTIONS), "two-sided") - 1)
        assert lower - tol(lower) <= v[right] <= upper + tol(upper), (n, f, v[right], lower, upper)
    # What the numbers say: with 10 seeds the 0 % and 100 % controls are decided almost always,
    # the 40 % control (mean e = 0.1 |G|) mostly stays inconclusive.
    if n == 10:
        assert vr.verdicts[0.0][dec.DOES_NOT_REPRODUCE] > 0.95 and vr.verdicts[1.0][dec.REPRODUCES] > 0.95
        assert vr.verdicts[0.4][dec.INCONCLUSIVE] > 0.75


def test_no_gain_no_definite_verdict():
    rng = np.random.default_rng(3)
    vr = verdict_rates(5, STUDIES, rng, gain=0.0)
    for f in FRACTIONS:  # every definite verdict needs an established (here: false) gain
        definite = vr.verdicts[f][dec.DOES_NOT_REPRODUCE] + vr.verdicts[f][dec.REPRODUCES]
        assert definite <= vr.established <= ALPHA + 4 * binomial_se(ALPHA, STUDIES)


def test_the_report_path_gives_the_same_verdicts_as_the_simulation():
    """A few simulated studies through analyze(): the same decisions as the vectorised path."""
    rng = np.random.default_rng(11)
    n, studies = 5, 12
    state = rng.bit_generator.state
    vr = verdict_rates(n, studies, rng)
    rng.bit_generator.state = state  # replay the same draws
    k = len(FRACTIONS)
    parent = rng.normal(0.0, NOISE_SD, size=(studies, 1, n))
    treatment = GAIN + rng.normal(0.0, NOISE_SD, size=(studies, 1, n))
    controls = np.asarray(FRACTIONS)[:, None] * GAIN + rng.normal(0.0, NOISE_SD, size=(studies, k, n))
    names = ["param_matched", "dup_route", "fixed_v"]
    counts = {f: {v: 0 for v in dec.VERDICTS} for f in FRACTIONS}
    for s in range(studies):
        vals = {"block_attnres": list(3.5 + parent[s, 0]), "rd_attnres": list(3.5 + treatment[s, 0])}
        vals.update({names[j]: list(3.5 + controls[s, j]) for j in range(k)})
        frames = frames_from_values(vals)
        res = analyze(frames["final"], frames["runs"])
        by = {a.control: a.verdict for a in res.assessments}
        for j, f in enumerate(FRACTIONS):
            counts[f][by[names[j]]] += 1
    for f in FRACTIONS:
        for v in dec.VERDICTS:
            assert counts[f][v] / studies == pytest.approx(vr.verdicts[f][v], abs=1e-12), (f, v)


def test_simulate_command_prints_the_table(capsys):
    assert main(["--studies", "500", "--seed", "1"]) == 0
    out = capsys.readouterr().out
    assert "Headline false-positive rate under a true null" in out
    assert out.count("\n") >= 20 and "wrong" in out


# --------------------------------------------------------------------------- sequential looks (DESIGN 8)


@pytest.mark.parametrize("cells", [1, 3])
def test_topping_up_whenever_undecided_keeps_the_false_positive_rate(cells):
    """Looks 3, 5, 10 under a true null, topping up while the gain is not established: a gain is
    claimed in at most alpha of the studies; re-reading at the full alpha each time would not."""
    rng = np.random.default_rng(4100 + cells)
    r = sequential_null(STUDIES, rng, looks=(3, 5, 10), alpha=ALPHA, cells=cells)
    se = binomial_se(ALPHA, STUDIES)
    assert r.overall <= ALPHA + 4 * se, r
    assert sum(r.first_at) == pytest.approx(r.overall, abs=1e-12)
    # Each look's claims stay within its spent increment (union bound, Holm over the cells).
    for rate, level in zip(r.first_at, increments(ALPHA, (3, 5, 10))):
        assert rate <= level + 4 * max(binomial_se(level, STUDIES), 1 / STUDIES), (rate, level)
    # The naive re-reading (every look at alpha) inflates the rate: the test above can fail.
    assert r.naive_overall > ALPHA + 8 * se, r


def test_a_look_that_established_the_gain_stands():
    """With spending, established at look k implies established at every later look (the sequential
    p only falls), also for Holm over 3 cells; the naive re-reading can lose a claim."""
    rng = np.random.default_rng(12)
    d = -0.004 + rng.normal(0.0, NOISE_SD, size=(2000, 3, 10)) - rng.normal(0.0, NOISE_SD, size=(2000, 3, 10))
    est = established_by_look(d, (3, 5, 10), ALPHA)
    assert est.any() and not (est[..., :-1] & ~est[..., 1:]).any()
    naive = established_by_look(d, (3, 5, 10), ALPHA, spend=False)
    assert (naive[..., :-1] & ~naive[..., 1:]).any()


def test_sequential_verdicts_keep_wrong_definite_verdicts_below_alpha():
    rng = np.random.default_rng(4200)
    sv = sequential_verdicts(STUDIES, rng, looks=(3, 5, 10), alpha=ALPHA, rho=RHO)
    assert sum(sv.stopped_at) == pytest.approx(1.0)
    for f in FRACTIONS:
        assert sum(sv.verdicts[f].values()) == pytest.approx(1.0)
        assert sv.wrong_definite(f, RHO) < ALPHA
    # A gain of 4 noise SDs is established by the last look; the 0 % and 100 % controls are decided.
    assert sv.established > 0.99
    assert sv.verdicts[0.0][dec.DOES_NOT_REPRODUCE] > 0.95 and sv.verdicts[1.0][dec.REPRODUCES] > 0.95
    # Under no gain at all, topping up never produces a definite control verdict beyond alpha.
    sv0 = sequential_verdicts(STUDIES, np.random.default_rng(4201), gain=0.0)
    assert sv0.established <= ALPHA + 4 * binomial_se(ALPHA, STUDIES)
    for f in FRACTIONS:
        assert sv0.verdicts[f][dec.DOES_NOT_REPRODUCE] + sv0.verdicts[f][dec.REPRODUCES] <= sv0.established


@pytest.mark.slow  # 4 s on 2 cores: out of the developer's loop (`pytest -m "not slow"`)
def test_the_report_path_reads_looks_as_the_simulation_does():
    """Studies through analyze() with a plan with looks, read at each look (first n_k seeds and
    with one extra seed between looks): the same established flags as the vectorised path."""
    rng = np.random.default_rng(13)
    looks, studies = (3, 5, 10), 16
    parent = rng.normal(0.0, NOISE_SD, size=(studies, 1, 10))
    treatment = -0.005 + rng.normal(0.0, NOISE_SD, size=(studies, 1, 10))
    est = established_by_look(treatment - parent, looks, ALPHA)[:, 0]  # [S, K]
    plan = AnalysisPlan(looks=looks)
    for s in range(studies):
        for k, nk in enumerate(looks):
            for n in {nk, min(nk + 1, 10)}:  # at the look, and one pair past it (same look)
                frames = frames_from_values(
                    {
                        "block_attnres": list(3.5 + parent[s, 0, :n]),
                        "rd_attnres": list(3.5 + treatment[s, 0, :n]),
                    }
                )
                h = analyze(frames["final"], frames["runs"], plan=plan).headlines[0]
                assert (h.look.k, h.look.n) == (k + 1, nk)
                assert h.established == bool(est[s, k]), (s, k, n)
    assert 0 < est[:, -1].sum() < studies  # both outcomes occur


def test_simulate_command_prints_the_sequential_table(capsys):
    assert main(["--studies", "300", "--seed", "2"]) == 0
    out = capsys.readouterr().out
    assert "Sequential looks [3, 5, 10]" in out and "naive" in out and "Sequential verdicts" in out
