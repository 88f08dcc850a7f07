"""The statistics plan of DESIGN section 6 (harness/report/stats/paired_tests.py, decisions.py, power.py, stats.py).

Every number in stats.csv is checked against an independent computation written here:
brute-force enumeration of all 2^n sign patterns (sign-flip and Wilcoxon nulls), scipy
(ttest_1samp, binomtest, wilcoxon), statsmodels (multipletests, sign_test, TTestPower),
a hand-written Holm step-down and a root-finder solve of the Fieller quadratic. The
verdict rules are checked on data built to give each verdict. CPU only, ~10 s:

    python -m pytest -q tests/stats/test_stats.py
"""

from __future__ import annotations

import io
import itertools
import json
import math

import numpy as np
import polars as pl
import pytest
import scipy.optimize as opt
import scipy.stats as st
from statsmodels.stats.descriptivestats import sign_test
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.power import TTestPower

from harness.common.terms import config_diff
from harness.design.analysis_plan import AnalysisPlan
from harness.report.simulation.synthetic import frames_from_values
from harness.report.stats import decisions as dec
from harness.report.stats import paired_tests as paired
from harness.report.stats.analysis import analyze
from harness.report.stats.descriptives import describe
from harness.report.stats.pairing import ProtocolMismatchError
from harness.report.stats.power import contrast_effect, mde, power_at, seeds_needed
from harness.report.stats.stats_table import CSV_COLUMNS

ALPHA = 0.05
PARENT = np.array([3.512, 3.498, 3.530, 3.505, 3.521])
D_TREAT = np.array([-0.031, -0.028, -0.035, -0.022, -0.030])  # treatment - parent, nats/token
NOISE = np.array([0.001, -0.002, 0.0005, 0.0015, -0.001])
CONTROLS = ("dup_route", "fixed_v", "param_matched")


def fixed_values() -> dict[str, list[float]]:
    """Five seeds; controls built to give each verdict by construction."""
    return {
        "block_attnres": list(PARENT),
        "rd_attnres": list(PARENT + D_TREAT),
        "param_matched": list(PARENT + D_TREAT + NOISE),  # the treatment's gain: reproduces
        "dup_route": list(PARENT + NOISE),  # no gain: does not reproduce
        "fixed_v": list(PARENT + np.array([-0.04, 0.03, -0.05, 0.02, -0.01])),  # noisy: inconclusive
        "dup_route_tied": list(PARENT),  # the A/A check: exactly the parent
    }


def run(vals, **kw):
    frames = frames_from_values(vals)
    return analyze(frames["final"], frames["runs"], **kw)


def rows_of(res) -> dict[str, dict]:
    table = pl.read_csv(io.StringIO(res.to_frame().write_csv()))
    return {r["comparison"]: r for r in table.iter_rows(named=True)}


# --------------------------------------------------------------------------- independent references


def signs(n: int) -> np.ndarray:
    return np.array(list(itertools.product([-1.0, 1.0], repeat=n)))


def sign_flip_enum(d: np.ndarray, alternative="two-sided") -> float:
    """All 2^n sign patterns of d, directly."""
    null = signs(d.size) @ d
    tol = 1e-9 * np.abs(d).sum()
    if alternative == "less":
        return float(np.mean(null <= d.sum() + tol))
    return float(np.mean(np.abs(null) >= abs(d.sum()) - tol)) if abs(d.sum()) > tol else 1.0


def wilcoxon_enum(d: np.ndarray) -> float:
    """Two-sided exact signed-rank p: all 2^m sign flips of the non-zero d, midranks."""
    d = d[d != 0]
    ranks = st.rankdata(np.abs(d))
    t_obs = ranks[d > 0].sum()
    null = np.array([ranks[np.array(s, bool)].sum() for s in itertools.product([0, 1], repeat=d.size)])
    return min(1.0, 2 * min(np.mean(null <= t_obs + 1e-9), np.mean(null >= t_obs - 1e-9)))


def holm_by_hand(p: list[float]) -> list[float]:
    order = np.argsort(p)
    m, running, out = len(p), 0.0, [0.0] * len(p)
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[i]))
        out[i] = running
    return out


def reference(d: np.ndarray) -> dict:
    n, mean, sd = d.size, d.mean(), d.std(ddof=1)
    half = st.t.ppf(0.975, n - 1) * sd / math.sqrt(n)
    k_neg, k_pos = int((d < 0).sum()), int((d > 0).sum())
    return {
        "n_pairs": n,
        "mean_diff": mean,
        "ci_low": mean - half,
        "ci_high": mean + half,
        "sd": sd,
        "t_p": st.ttest_1samp(d, 0.0).pvalue,
        "perm_p": sign_flip_enum(d),
        "wilcoxon_p": wilcoxon_enum(d),
        "sign_p": st.binomtest(k_neg, k_neg + k_pos, 0.5).pvalue,
        "d_z": mean / sd,
        "ppl_change": math.exp(mean) - 1,
        "wins": f"{k_neg}/{n}",
    }


def fieller_by_root(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Fieller limits by solving (a - f b)^2 = q var(a - f b) numerically, outwards from a/b."""
    n = x.size
    a, b = x.mean(), y.mean()
    cov = np.cov(x, y, ddof=1) / n
    q = st.t.ppf(0.975, n - 1) ** 2

    def g(f):
        return (a - f * b) ** 2 - q * (cov[0, 0] - 2 * f * cov[0, 1] + f * f * cov[1, 1])

    f0 = a / b
    return opt.brentq(g, f0 - 1e3, f0), opt.brentq(g, f0, f0 + 1e3)


# --------------------------------------------------------------------------- descriptives


def test_stats_csv_columns_are_the_design_contract():
    design = (
        "comparison, kind, size, budget_tokens, n_pairs, seeds, mean_diff, ci_low, ci_high, sd, d_z, wins, "
        "ppl_change, t_p, p_one_sided, perm_p, wilcoxon_p, sign_p, holm_p, contrast_mean, contrast_p, "
        "gain_fraction, gain_fraction_low, gain_fraction_high, verdict, note, mde_nats, seeds_needed"
    )
    assert CSV_COLUMNS == tuple(design.split(", "))
    table = run(fixed_values()).to_frame()
    assert tuple(table.columns[: len(CSV_COLUMNS)]) == CSV_COLUMNS


def test_descriptives_match_independent_computation():
    vals = fixed_values()
    rows = rows_of(run(vals))
    assert len(rows) == 9  # treatment, 3 controls, the A/A check, treatment - each of the 4
    for label, row in rows.items():
        first, second = label.split(" - ")
        d = np.array(vals[first]) - np.array(vals[second])
        if np.all(d == 0):
            continue  # the A/A row: checked in test_zero_spread_*
        for key, want in reference(d).items():
            if isinstance(want, str):
                assert row[key] == want, (label, key)
            else:
                assert row[key] == pytest.approx(want, abs=1e-12, rel=1e-12), (label, key, row[key], want)
        assert row["seeds"] == "0 1 2 3 4"
        assert row["perm_min_p"] == row["wilcoxon_min_p"] == row["sign_min_p"] == 0.0625  # 2**(1-5)


@pytest.mark.parametrize("n", [3, 4, 7, 10, 13])
def test_sign_flip_p_equals_direct_enumeration(n):
    rng = np.random.default_rng(n)
    for _ in range(20):
        d = rng.normal(-0.3, 1.0, n)
        if rng.random() < 0.3:
            d = np.round(d, 1)  # ties and zeros
        assert paired.sign_flip_p(d) == pytest.approx(sign_flip_enum(d), abs=1e-15)
        assert paired.sign_flip_p(d, "less") == pytest.approx(sign_flip_enum(d, "less"), abs=1e-15)
    # vectorised over studies gives each study's own p
    batch = rng.normal(size=(4, n))
    assert paired.sign_flip_p(batch).tolist() == [paired.sign_flip_p(b) for b in batch]


def test_sign_flip_beyond_twenty_pairs_is_exact():
    d = np.random.default_rng(7).normal(0.4, 1.0, 24)
    # 2^24 patterns counted from the two halves' 2^12 sums each; check against the distribution of
    # the sum computed independently by convolving the two halves' sum distributions on a fine grid.
    lo = np.sort(signs(12) @ d[:12])
    hi = signs(12) @ d[12:]
    want = np.mean([np.mean(np.abs(h + lo) >= abs(d.sum()) - 1e-9 * np.abs(d).sum()) for h in hi])
    assert paired.sign_flip_p(d) == pytest.approx(want, abs=1e-15)


def test_wilcoxon_with_ties_and_a_zero_is_exact_and_deterministic():
    d = np.array([0.0, 3, -3, -2, -3]) * 1e-3  # tied |d| and a zero difference
    ps = {paired.wilcoxon_p(d)[1] for _ in range(50)}
    assert len(ps) == 1 and ps.pop() == pytest.approx(wilcoxon_enum(d), abs=1e-15)
    # The trap of the old code: scipy's permutation method asked for 2**m resamples (m non-zero d)
    # counts the zero too, finds 2**m < 2**n and samples at random.
    old = {
        st.wilcoxon(d, zero_method="wilcox", method=st.PermutationMethod(n_resamples=2**4)).pvalue
        for _ in range(30)
    }
    assert len(old) > 1
    d2 = np.array([0.0, 1, 1, 2, -3, 4, 4, -1]) * 1e-3
    assert paired.wilcoxon_p(d2)[1] == pytest.approx(wilcoxon_enum(d2), abs=1e-15)
    # Without ties or zeros it equals scipy's exact table.
    for seed in range(10):
        x = np.random.default_rng(seed).normal(0.2, 1, 9)
        assert paired.wilcoxon_p(x)[1] == pytest.approx(st.wilcoxon(x, method="exact").pvalue, abs=1e-14)
        assert paired.wilcoxon_p(x)[0] == st.wilcoxon(x, method="exact").statistic


def test_sign_test_matches_statsmodels():
    rng = np.random.default_rng(3)
    for n in (3, 5, 8, 11):
        for _ in range(10):
            d = np.round(rng.normal(0.2, 1, n), 0)
            if np.all(d == 0):
                continue
            assert paired.sign_test_p(d) == pytest.approx(sign_test(d, 0.0)[1], abs=1e-14)
    assert paired.sign_test_p(np.zeros(4)) == 1.0  # statsmodels raises here: no evidence


def test_min_attainable_p():
    assert [paired.min_attainable_p(m) for m in (0, 1, 5, 9)] == [1.0, 1.0, 0.0625, 2.0**-8]
    d = np.array([-1.0, -2.0, -3.0, -4.0, -5.0])  # every difference one sign: each test at its floor
    s = describe(d)
    assert s.perm_p == s.wilcoxon_p == s.sign_p == s.min_p == 0.0625


def test_zero_spread_t_is_undefined_and_the_headline_uses_the_exact_sign_flip():
    # Three identical differences of -0.001 (equal in decimal, not in the last bits).
    p3 = np.array([3.5, 3.6, 3.7])
    res = run({"block_attnres": list(p3), "rd_attnres": list(p3 - 0.001), "dup_route": list(p3 - 0.0005)})
    (h,) = res.headlines
    row = rows_of(res)["rd_attnres - block_attnres"]
    assert math.isnan(row["t_p"]) and math.isnan(row["ci_low"]) and row["sd"] == 0.0
    assert h.exact and h.p_one_sided == row["p_one_sided"] == 1 / 8 == row["holm_p"]
    assert not h.established and h.verdict == dec.GAIN_NOT_ESTABLISHED
    assert "zero spread" in row["note"] and row["perm_p"] == 0.25
    assert rows_of(res)["dup_route - block_attnres"]["verdict"] == dec.NOT_ASSESSED
    # Six identical differences: the exact one-sided p 1/64 < 0.05 establishes it, on an exact p.
    p6 = np.linspace(3.4, 3.9, 6)
    (h6,) = run({"block_attnres": list(p6), "rd_attnres": list(p6 - 0.001)}).headlines
    assert h6.exact and h6.p_one_sided == pytest.approx(1 / 64, abs=1e-15) and h6.established
    # All zero: every p is 1, nothing is 0.
    z = describe(np.zeros(5))
    assert (z.perm_p, z.wilcoxon_p, z.sign_p, z.mean) == (1.0, 1.0, 1.0, 0.0) and math.isnan(z.t_p)


def test_nan_and_shape_errors():
    with pytest.raises(ValueError, match="non-finite"):
        describe([1.0, float("nan"), 2.0])
    with pytest.raises(ValueError, match="one-dimensional"):
        describe(np.zeros((2, 3)))
    one = describe([0.5])
    assert (one.n, one.mean, one.wins, math.isnan(one.t_p), math.isnan(one.perm_p)) == (1, 0.5, 0, True, True)


# --------------------------------------------------------------------------- decisions


def test_holm_matches_statsmodels_and_ignores_nan(cheap_gc):
    rng = np.random.default_rng(11)
    for m in (1, 2, 4, 9):
        p = rng.uniform(0, 0.2, size=(8, m))
        got = dec.holm(p)
        for row, g in zip(p, got):
            assert g == pytest.approx(multipletests(row, method="holm")[1], abs=1e-15)
            assert g == pytest.approx(holm_by_hand(list(row)), abs=1e-15)
    p = np.array([0.01, np.nan, 0.04, 0.03])
    got = dec.holm(p)
    assert math.isnan(got[1])
    assert got[[0, 2, 3]] == pytest.approx(multipletests([0.01, 0.04, 0.03], method="holm")[1], abs=1e-15)


def test_headline_is_one_sided_with_holm_over_cells():
    vals = fixed_values()
    f1 = frames_from_values(vals, size="small")
    weak = dict(vals, rd_attnres=list(PARENT + np.array([-0.010, 0.004, -0.012, 0.002, -0.009])))
    f2 = frames_from_values(weak, size="120m")
    final = pl.concat([f1["final"], f2["final"].with_columns(pl.col("run_id") + "-b")])
    runs = pl.concat([f1["runs"], f2["runs"].with_columns(pl.col("run_id") + "-b")])
    res = analyze(final, runs)
    raw = {}
    for size, v in (("small", vals), ("120m", weak)):
        d = np.array(v["rd_attnres"]) - PARENT
        raw[size] = st.ttest_1samp(d, 0.0, alternative="less").pvalue
    want = dict(zip(raw, multipletests(list(raw.values()), method="holm")[1]))
    for h in res.headlines:
        assert h.p_one_sided == pytest.approx(raw[h.size], abs=1e-14) and not h.exact
        assert h.holm_p == pytest.approx(want[h.size], abs=1e-14) and h.n_cells == 2
        assert h.established == (h.holm_p < ALPHA and h.mean < 0)
    est = {h.size: h.established for h in res.headlines}
    assert est == {"small": True, "120m": False}
    # Controls are assessed only in the established cell.
    for a in res.assessments:
        assert (a.verdict == dec.NOT_ASSESSED) == (a.size == "120m")


def test_contrast_tests_and_verdicts_match_scipy_and_statsmodels():
    vals = fixed_values()
    res = run(vals)
    rows = rows_of(res)
    p, t = np.array(vals["block_attnres"]), np.array(vals["rd_attnres"])
    raw = {}
    for c in CONTROLS:
        e = np.array(vals[c]) - 0.5 * p - 0.5 * t  # e = c - (1 - rho) p - rho t
        raw[c] = st.ttest_1samp(e, 0.0).pvalue
        row = rows[f"{c} - block_attnres"]
        assert row["contrast_mean"] == pytest.approx(e.mean(), abs=1e-15)
        assert row["contrast_p"] == pytest.approx(raw[c], abs=1e-13)
    holm = dict(zip(raw, multipletests(list(raw.values()), method="holm")[1]))  # the A/A is not in it
    for c in CONTROLS:
        row = rows[f"{c} - block_attnres"]
        assert row["holm_p"] == pytest.approx(holm[c], abs=1e-13) and row["family_size"] == 3
        mean_e = row["contrast_mean"]
        want = (
            dec.DOES_NOT_REPRODUCE
            if holm[c] < ALPHA and mean_e > 0
            else dec.REPRODUCES
            if holm[c] < ALPHA and mean_e < 0
            else dec.INCONCLUSIVE
        )
        assert row["verdict"] == want
    assert [rows[f"{c} - block_attnres"]["verdict"] for c in CONTROLS] == [
        dec.DOES_NOT_REPRODUCE,
        dec.INCONCLUSIVE,
        dec.REPRODUCES,
    ]
    # rho moves the threshold: with rho = 0.9, a control at 0.95 of the gain is nearer the treatment.
    v2 = dict(vals, fixed_v=list(PARENT + 0.95 * D_TREAT + NOISE / 3))
    rows2 = rows_of(run(v2, plan=AnalysisPlan(reproduce_fraction=0.9)))
    e2 = np.array(v2["fixed_v"]) - 0.1 * p - 0.9 * t
    assert rows2["fixed_v - block_attnres"]["contrast_mean"] == pytest.approx(e2.mean(), abs=1e-15)
    assert rows2["fixed_v - block_attnres"]["contrast_p"] == pytest.approx(
        st.ttest_1samp(e2, 0).pvalue, abs=1e-13
    )


def test_gain_fraction_fieller_matches_a_direct_solve():
    rng = np.random.default_rng(5)
    for _ in range(30):
        n = int(rng.integers(3, 12))
        y = rng.normal(-1.0, 0.4, n)
        x = 0.6 * y + rng.normal(0.0, 0.3, n)
        f = dec.fieller(x, y)
        se_y = y.std(ddof=1) / math.sqrt(n)
        covers_zero = abs(y.mean()) <= st.t.ppf(0.975, n - 1) * se_y
        assert bool(f["bounded"]) == (not covers_zero)
        assert f["f"] == pytest.approx(x.mean() / y.mean(), rel=1e-13)
        if f["bounded"]:
            lo, hi = fieller_by_root(x, y)
            assert (f["low"], f["high"]) == (pytest.approx(lo, abs=1e-9), pytest.approx(hi, abs=1e-9))
    # The gain's interval covers 0: unbounded, said so in the row.
    y = np.array([-0.01, 0.008, -0.012, 0.006, -0.004])
    assert not dec.fieller(0.5 * y, y)["bounded"]
    rows = rows_of(run(fixed_values()))
    pm = rows["param_matched - block_attnres"]
    x = np.array(fixed_values()["param_matched"]) - PARENT
    y = np.array(fixed_values()["rd_attnres"]) - PARENT
    lo, hi = fieller_by_root(x, y)
    assert pm["gain_fraction"] == pytest.approx(x.mean() / y.mean(), rel=1e-13)
    assert (pm["gain_fraction_low"], pm["gain_fraction_high"]) == (
        pytest.approx(lo, abs=1e-8),
        pytest.approx(hi, abs=1e-8),
    )


# --------------------------------------------------------------------------- verdicts need evidence


def test_treatment_significantly_worse_assesses_no_control():
    vals = dict(fixed_values(), rd_attnres=list(PARENT - D_TREAT))  # +0.029: significant, wrong sign
    res = run(vals)
    (h,) = res.headlines
    assert h.mean > 0 and not h.established and h.reason == "mean d >= 0"
    assert h.p_one_sided == pytest.approx(st.ttest_1samp(-D_TREAT, 0, alternative="less").pvalue, abs=1e-14)
    for a in res.assessments:
        assert a.verdict == dec.NOT_ASSESSED and math.isnan(a.contrast_p) and math.isnan(a.holm_p)
        assert not math.isnan(a.mde_nats) and a.n == 5  # descriptives and the MDE still shown


def test_treatment_with_two_pairs_assesses_no_control():
    vals = fixed_values()
    vals["rd_attnres"] = vals["rd_attnres"][:2]
    frames = frames_from_values({k: v for k, v in vals.items() if k != "rd_attnres"})
    f2 = frames_from_values({"rd_attnres": vals["rd_attnres"]})
    res = analyze(pl.concat([frames["final"], f2["final"]]), pl.concat([frames["runs"], f2["runs"]]))
    (h,) = res.headlines
    assert h.n == 2 and h.reason == "fewer than 3 pairs" and math.isnan(h.p_one_sided)
    rows = rows_of(res)
    assert rows["param_matched - block_attnres"]["t_p"] < 0.01  # the control beat the parent ...
    assert {a.verdict for a in res.assessments} == {dec.NOT_ASSESSED}  # ... yet no verdict


def test_degenerate_takes_precedence_and_leaves_the_family():
    vals = dict(fixed_values(), dup_route=list(PARENT))  # all-zero paired differences: degenerate by itself
    degenerate = {
        ("small", 1_000_000, "param_matched"): "routes identical at every site",
        ("small", 1_000_000, "dup_route_tied"): "A/A: exempt",
    }
    res = run(vals, degenerate=degenerate)
    by = {a.control: a for a in res.assessments}
    assert by["param_matched"].verdict == dec.DEGENERATE  # it reproduces the gain, yet is invalid
    assert (
        by["dup_route"].verdict == dec.DEGENERATE
        and "within the numerical floor" in by["dup_route"].degenerate_reason
    )
    assert by["fixed_v"].family_size == 1 and math.isnan(by["param_matched"].holm_p)
    assert by["fixed_v"].holm_p == pytest.approx(by["fixed_v"].contrast_p, abs=0)  # family of one
    assert res.aa_checks[0].status == "bit-identical"  # the A/A check is exempt
    rows = rows_of(res)
    assert "degenerate: routes identical" in rows["param_matched - block_attnres"]["note"]
    # Also where the gain is not established: invalid, not "not assessed".
    weak = dict(vals, rd_attnres=list(PARENT - D_TREAT))
    by = {a.control: a.verdict for a in run(weak, degenerate=degenerate).assessments}
    assert by == {"dup_route": dec.DEGENERATE, "param_matched": dec.DEGENERATE, "fixed_v": dec.NOT_ASSESSED}
    warned = run(vals, degenerate={("small", 1, "fixed_v"): "x"}).warnings
    assert any("degeneracy given for ('small', 1, 'fixed_v')" in w and "ignored" in w for w in warned)


def test_aa_check_statuses_and_no_family():
    p3 = PARENT[:3]
    treat = list(p3 - 0.02)
    base = {
        "block_attnres": list(p3),
        "rd_attnres": [t + e for t, e in zip(treat, [0.001, -0.001, 0.0])],
        "fixed_v": list(p3 - 0.01),
    }
    cases = {
        "bit-identical": [0.0, 0.0, 0.0],
        "pass": [0.004, -0.006, 0.002],  # max 0.006 < |G|/2 = 0.01
        "warn": [0.004, -0.006, 0.0128],  # max 0.0128 >= 0.01, no systematic offset
        "FAIL": [0.015, 0.0151, 0.0149],  # a systematic offset
    }
    for status, d in cases.items():
        res = run(dict(base, dup_route_tied=list(p3 + np.array(d))))
        (aa,) = res.aa_checks
        d_aa = (p3 + np.array(d)) - p3
        assert aa.status == status, (status, aa)
        assert aa.max_abs == pytest.approx(np.abs(d_aa).max(), abs=0)
        assert aa.threshold == pytest.approx(0.5 * abs(res.headlines[0].mean), abs=1e-15)
        if status != "bit-identical":
            assert aa.p == pytest.approx(st.ttest_1samp(d_aa, 0).pvalue, abs=1e-13)
        (a,) = res.assessments  # only fixed_v: the A/A is not a control
        assert a.control == "fixed_v" and a.family_size in (0, 1)
        assert rows_of(res)["dup_route_tied - block_attnres"]["verdict"] == status
        # One cell: the Holm family of the A/A offset tests has one member (DESIGN 6: Holm over the cells).
        assert aa.n_cells == 1 and (aa.holm_p == aa.p or (math.isnan(aa.p) and math.isnan(aa.holm_p)))
    # Two pairs: no offset test, the floor still stated; no treatment: 1e-3 threshold.
    (aa,) = run({"block_attnres": list(p3[:2]), "dup_route_tied": list(p3[:2] + [0.002, 0.0])}).aa_checks
    assert (aa.status, aa.tested, aa.threshold) == ("warn", False, 1e-3)


def test_power_figures_use_the_planned_effect():
    tp = TTestPower()
    for alt, sm_alt in (("one-sided", "larger"), ("two-sided", "two-sided")):
        m = mde(0.004, 5, 0.05, 0.8, alt)
        assert tp.power(effect_size=m / 0.004, nobs=5, alpha=0.05, alternative=sm_alt) == pytest.approx(
            0.8, abs=1e-8
        )
        s = seeds_needed(0.003, 0.004, 0.05, 0.8, alt, 30)
        powers = [tp.power(effect_size=0.75, nobs=k, alpha=0.05, alternative=sm_alt) for k in (s.n - 1, s.n)]
        assert powers[0] < 0.8 <= powers[1] and s.reachable
        assert power_at(0.003, 0.004, s.n, 0.05, alt) == pytest.approx(powers[1], abs=1e-15)
    far = seeds_needed(0.0001, 0.004, 0.05, 0.8, "one-sided", 30)
    assert far.n is None and not far.reachable and far.power_at_max < 0.8
    assert seeds_needed(None, 0.004, 0.05, 0.8, "one-sided", 30).n is None
    assert contrast_effect(0.01, 0.5) == 0.005 and contrast_effect(0.01, 0.8) == pytest.approx(0.002)
    # In the report: the observed effect does not move seeds_needed (only the sd and the plan do).
    plan = AnalysisPlan(min_effect_nats=0.01)
    a = rows_of(run(fixed_values(), plan=plan))["rd_attnres - block_attnres"]
    shifted = dict(fixed_values(), rd_attnres=list(PARENT + D_TREAT - 0.05))
    b = rows_of(run(shifted, plan=plan))["rd_attnres - block_attnres"]
    assert a["seeds_needed"] == b["seeds_needed"] and a["mde_nats"] == pytest.approx(b["mde_nats"], rel=1e-9)
    sd = np.std(D_TREAT, ddof=1)
    assert a["seeds_needed"] == seeds_needed(0.01, sd, 0.05, 0.8, "one-sided", 30).n
    assert a["mde_nats"] == pytest.approx(mde(sd, 5, 0.05, 0.8, "one-sided"), rel=1e-12)
    tiny = rows_of(run(fixed_values(), plan=AnalysisPlan(min_effect_nats=1e-5)))["rd_attnres - block_attnres"]
    assert tiny["seeds_needed"] is None and "not reachable at this budget (> max_seeds 30)" in tiny["note"]


@pytest.mark.parametrize("n", [3, 4, 5, 6])
def test_two_sided_mde_keeps_its_power_at_few_pairs(n):
    """Where scipy's noncentral t returns NaN (3-6 pairs, small levels) the MDE still has power 0.8: a
    seeded Monte Carlo paired t-test (40,000 studies, SE 0.002) at the returned effect rejects 0.8 +- 0.02
    of the time, and the exact power (conditional on the sample sd) is 0.8 to 1e-9 (the old root finder
    read NaN as power 1: 0.61 at n = 3, 0.05/7)."""
    rng = np.random.default_rng(70 + n)
    for level in (0.05 / 7, 0.05 / 3, 0.005):
        m = mde(0.04, n, level, 0.8, "two-sided")
        assert power_at(m, 0.04, n, level, "two-sided") == pytest.approx(0.8, abs=1e-9)
        d = rng.normal(m, 0.04, (40_000, n))
        p = st.ttest_1samp(d, 0.0, axis=1).pvalue
        assert (p < level).mean() == pytest.approx(0.8, abs=0.02), (n, level, m)
    # the powers never NaN where the noncentral t is: power_at over a range of effects is finite and rising
    effects = np.linspace(0.01, 0.6, 60)
    pw = np.array([power_at(e, 0.04, n, 0.005, "two-sided") for e in effects])
    assert np.isfinite(pw).all() and (np.diff(pw) >= -1e-12).all()


# --------------------------------------------------------------------------- plan, pairing, left-out runs


def test_plan_is_read_from_the_runs():
    frames = frames_from_values(fixed_values())
    stored = AnalysisPlan(alpha=0.01, reproduce_fraction=0.5, min_effect_nats=0.02).as_config()
    with_plan = frames["runs"].with_columns(
        pl.col("config").map_elements(lambda c: json.dumps({**json.loads(c), "analysis": stored}), pl.String)
    )
    res = analyze(frames["final"], with_plan)
    assert (res.plan.alpha, res.plan.min_effect_nats, res.plan.source) == (0.01, 0.02, "stored with the runs")
    assert res.headlines[0].level == 0.01
    other = with_plan.with_columns(
        pl.when(pl.col("variant") == "fixed_v")
        .then(pl.col("config").str.replace('"alpha": 0.01', '"alpha": 0.05'))
        .otherwise(pl.col("config"))
        .alias("config")
    )
    with pytest.raises(ValueError, match=r"2 different analysis plans \(analysis.alpha: 0.01 != 0.05\)"):
        analyze(frames["final"], other)
    assert analyze(frames["final"], frames["runs"]).plan.source == "defaults"


def test_protocol_mismatch_is_an_error_naming_fields():
    frames = frames_from_values(fixed_values())
    bad_cfg = json.dumps(
        {
            "variant": "rd_attnres",
            "seed": 2,
            "size": "small",
            "budget_tokens": 1_000_000,
            "train": {"lr": 1e-3},
        }
    )
    sel = pl.col("run_id") == "rd_attnres-s2"
    new_hash = pl.when(sel).then(pl.lit("p1")).otherwise(pl.col("protocol_hash")).alias("protocol_hash")
    runs = frames["runs"].with_columns(
        new_hash, pl.when(sel).then(pl.lit(bad_cfg)).otherwise(pl.col("config")).alias("config")
    )
    final = frames["final"].with_columns(new_hash)
    with pytest.raises(
        ProtocolMismatchError,
        match=r"seed=2: protocol_hash p1 \(run rd_attnres-s2\) != p0 "
        r"\(run block_attnres-s2\); differing fields: train\.lr: 0\.001 != 0\.003",
    ):
        analyze(final, runs)
    res = analyze(final, runs, allow_partial=True)
    tp = rows_of(res)["rd_attnres - block_attnres"]
    assert tp["n_pairs"] == 4 and tp["seeds"] == "0 1 3 4" and "unpaired seeds 2" in tp["note"]
    assert "seed 2 (protocol mismatch: train.lr" in tp["missing_seeds"]
    keep = [0, 1, 3, 4]
    assert tp["t_p"] == pytest.approx(st.ttest_1samp(D_TREAT[keep], 0).pvalue, abs=1e-12)
    assert tp["wilcoxon_min_p"] == 0.125


def test_config_diff_names_fields_and_skips_variant():
    a = json.dumps({"variant": "x", "train": {"lr": 1, "wd": 0}, "corpus": "c"})
    b = json.dumps({"variant": "y", "train": {"lr": 2, "wd": 0}, "extra": 1, "corpus": "c"})
    assert config_diff(a, b, values=True, ignore=("variant", "role", "run_id")) == [
        "extra: '<absent>' != 1",
        "train.lr: 1 != 2",
    ]


def test_divergence_table_and_lost_seeds():
    frames = frames_from_values(fixed_values())
    runs = (
        frames["runs"]
        .with_columns(
            pl.when(pl.col("run_id") == "rd_attnres-s3")
            .then(pl.lit("failed"))
            .when(pl.col("run_id") == "fixed_v-s1")
            .then(pl.lit("diverged"))
            .otherwise(pl.col("status"))
            .alias("status"),
            pl.when(pl.col("run_id") == "rd_attnres-s3")
            .then(pl.lit("RuntimeError: CUDA OOM"))
            .otherwise(pl.col("error"))
            .alias("error"),
        )
        .filter(pl.col("run_id") != "dup_route-s4")
    )
    final = (
        frames["final"]
        .filter(~pl.col("run_id").is_in(["rd_attnres-s3", "dup_route-s4"]))
        .with_columns(
            pl.when(pl.col("run_id") == "fixed_v-s1")
            .then(float("nan"))
            .otherwise(pl.col("val_nll"))
            .alias("val_nll")
        )
    )
    res = analyze(final, runs)
    table = {r.variant: r for r in res.divergence}
    assert (table["fixed_v"].done, table["fixed_v"].diverged, table["fixed_v"].diverged_seeds) == (4, 1, (1,))
    assert (table["rd_attnres"].failed, table["rd_attnres"].failed_seeds) == (1, (3,))
    assert table["dup_route"].done == 4 and [r.variant for r in res.diverged()] == ["fixed_v"]
    rows = rows_of(res)
    tp = rows["rd_attnres - block_attnres"]
    assert (tp["n_pairs"], tp["seeds"], tp["missing_seeds"]) == (
        4,
        "0 1 2 4",
        "seed 3 (rd_attnres: failed: RuntimeError: CUDA OOM)",
    )
    assert "unpaired seeds 1, 3" in rows["rd_attnres - fixed_v"]["note"]
    # The contrast uses the seeds where control, parent and treatment all ran, plus seed 1 where the
    # control diverged and the other two finished: a loss for the control, e = +max |e| (DESIGN 6).
    fv = next(a for a in res.assessments if a.control == "fixed_v")
    vals = fixed_values()
    e = [vals["fixed_v"][s] - 0.5 * vals["block_attnres"][s] - 0.5 * vals["rd_attnres"][s] for s in (0, 2, 4)]
    assert fv.seeds == (0, 1, 2, 4) and fv.n == 4 and [i.seed for i in fv.imputed] == [1]
    assert fv.imputed[0].loser == "fixed_v" and fv.imputed[0].value == max(abs(x) for x in e)
    # stats.csv: the control row describes its 4 control - parent pairs, and says which seeds the verdict uses.
    cp = rows["fixed_v - block_attnres"]
    assert (cp["n_pairs"], cp["seeds"]) == (4, "0 2 3 4")
    assert (cp["test_pairs"], cp["test_seeds"], cp["imputed_seeds"]) == (4, "0 1 2 4", "1")
    assert (
        "the verdict uses 4 pair(s), seeds 0 1 2 4" in cp["note"]
        and "seed(s) 1 count as losses" in cp["note"]
    )
    # The treatment's seed 3 failed for a non-numerical reason (CUDA OOM): missing, not a loss.
    (h,) = res.headlines
    assert h.seeds == (0, 1, 2, 4) and h.imputed == ()


def test_mixed_code_versions_warn_and_duplicates_error():
    frames = frames_from_values(fixed_values())
    runs = frames["runs"].with_columns(
        pl.when(pl.col("run_id") == "rd_attnres-s0")
        .then(pl.lit("def5678+dirty"))
        .otherwise(pl.col("code_version"))
        .alias("code_version")
    )
    res = analyze(frames["final"], runs)
    assert [w for w in res.warnings if "mix code versions" in w] == [
        "size=small budget_tokens=1000000: paired runs mix code versions: abc1234 (29 runs), "
        "def5678+dirty (1 run: rd_attnres-s0)"
    ]
    dup = (
        frames["final"]
        .filter(pl.col("run_id") == "rd_attnres-s0")
        .with_columns(pl.lit("again").alias("run_id"))
    )
    with pytest.raises(ValueError, match=r"more than one finished run.*rd_attnres.*seed=0.*again"):
        analyze(pl.concat([frames["final"], dup]), frames["runs"])


def test_bad_frames_raise_clear_errors():
    frames = frames_from_values(fixed_values())
    with pytest.raises(ValueError, match=r"lacks column\(s\) \['val_nll'\]"):
        analyze(frames["final"].drop("val_nll"), frames["runs"])
    f2 = frames_from_values({k: v for k, v in fixed_values().items() if k != "block_attnres"})
    with pytest.raises(ValueError, match="exactly one parent"):
        analyze(f2["final"], f2["runs"])
    with pytest.raises(ValueError, match="no runs found for grid 'nope'"):
        analyze(frames["final"], frames["runs"], grid="nope")


def test_no_treatment_means_no_verdict():
    res = run({k: v for k, v in fixed_values().items() if k != "rd_attnres"})
    assert res.treatment is None and res.headlines == ()
    assert {a.verdict for a in res.assessments} == {dec.NOT_ASSESSED}
    assert {a.reason for a in res.assessments} == {"no treatment in this cell"}


def test_mixed_model_matches_paired_means_and_reports_boundary_warnings():
    res = run(fixed_values())
    (mm,) = res.mixed
    assert mm.error == "" and mm.n_obs == 30 and mm.n_seeds == 5
    means = {c.first: c.stats.mean for c in res.comparisons if c.second == "block_attnres"}
    for coef in mm.coefs:
        assert coef.estimate == pytest.approx(means[coef.variant], abs=1e-9)
    rng = np.random.default_rng(1)
    flat = {
        v: list(3.5 + eff + rng.normal(0, 0.003, 5))
        for v, eff in (("block_attnres", 0.0), ("rd_attnres", -0.03), ("dup_route", 0.0))
    }
    res2 = run(flat)
    assert res2.mixed[0].seed_var < 1e-10 and any(
        "may be on the boundary" in w for w in res2.mixed[0].warnings
    )
    assert any(w.startswith("mixed model size=small") and "boundary" in w for w in res2.warnings)
