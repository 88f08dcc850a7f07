"""Where a grid's runs ran (harness/report/stats/provenance.py, DESIGN 13): hardware classes, balance, straddling
pairs, the variant x hardware check (Welch's ANOVA against statsmodels) and every verdict within the largest
class. CPU only, a few seconds."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest
import scipy.stats as st
from statsmodels.stats.oneway import anova_oneway

from harness.report.build import Frames, compute_stats
from harness.report.render.sections import render_markdown
from harness.report.simulation.synthetic import frames_from_values
from harness.report.stats.analysis import analyze
from harness.report.stats.pairing import Pair
from harness.report.stats.provenance import (
    STRADDLING,
    UNKNOWN,
    class_balance,
    hardware_by_run,
    welch_anova,
)

# The treatment gains only on class B (4 seeds); on class A (6 seeds, the largest) it does not.
PARENT = [3.10, 3.12, 3.08, 3.11, 3.09, 3.13, 3.07, 3.115, 3.095, 3.105]
D_A = [0.004, -0.003, 0.002, -0.005, 0.001, 0.0015]
D_B = [-0.10, -0.11, -0.095, -0.105]
A, B = "cpu-amd-epyc-7b13-avx512/fp32/torch2.5.1/eager", "cuda-nvidia-h100/bf16/torch2.5.1/inductor"


def _mixed(move: dict[tuple[str, int], str] | None = None) -> Frames:
    """Parent, treatment and a control equal to the treatment; seeds 0-5 on class A, 6-9 on class B
    (``move``: (variant, seed) -> another class)."""
    treat = [p + d for p, d in zip(PARENT, D_A + D_B, strict=True)]
    frames = frames_from_values({"block_attnres": PARENT, "rd_attnres": treat, "fixed_v": treat}, grid="g")
    hw = [
        (move or {}).get((v, s), A if s < 6 else B)
        for v, s in frames["runs"].select("variant", "seed").iter_rows()
    ]
    return Frames(frames["final"], frames["runs"].with_columns(hardware=pl.Series(hw)))


def test_welch_anova_equals_statsmodels_and_welchs_t():
    rng = np.random.default_rng(3)
    groups = [rng.normal(0.0, 0.01, 6), rng.normal(0.02, 0.03, 4), rng.normal(-0.01, 0.005, 5)]
    for k in (2, 3):
        f, df1, df2, p = welch_anova(groups[:k])
        ref = anova_oneway(groups[:k], use_var="unequal", welch_correction=True)
        assert (f, df1, df2, p) == pytest.approx((ref.statistic, ref.df[0], ref.df[1], ref.pvalue), rel=1e-10)
    t = st.ttest_ind(groups[0], groups[1], equal_var=False)  # two groups: Welch's t, F = t^2
    f, _, _, p = welch_anova(groups[:2])
    assert f == pytest.approx(t.statistic**2, rel=1e-10) and p == pytest.approx(t.pvalue, rel=1e-10)
    with pytest.raises(ValueError, match="at least 2 groups"):
        welch_anova(groups[:1])
    with pytest.raises(ValueError, match="non-zero variance"):
        welch_anova([groups[0], np.array([0.1, 0.1])])


def test_a_gain_carried_by_the_smaller_class_does_not_hold_within_the_largest():
    stats = compute_stats(_mixed(), grid="g")
    prov = stats.provenance
    assert prov.mixed and prov.classes == ((A, 18), (B, 12)) and prov.largest == A
    assert {v.variant: v.classes for v in prov.variants}["rd_attnres"] == ((A, 6), (B, 4))
    assert all(v.commits == (("abc1234", 10),) for v in prov.variants)
    assert prov.straddling == () and all(b.balanced for b in prov.balance)
    check = next(c for c in prov.checks if c.comparison == "rd_attnres - block_attnres")
    d = {A: np.array(D_A), B: np.array(D_B)}  # the paired differences, by construction
    rows = {r.hardware: r for r in check.rows}
    for hw, x in d.items():
        lo, hi = st.t.interval(0.95, x.size - 1, loc=x.mean(), scale=st.sem(x))
        assert rows[hw].n == x.size
        assert (rows[hw].mean, rows[hw].ci_low, rows[hw].ci_high) == pytest.approx(
            (x.mean(), lo, hi), abs=1e-12
        )
    ref = anova_oneway([d[A], d[B]], use_var="unequal")
    assert check.tested == (A, B) and check.p == pytest.approx(ref.pvalue, rel=1e-8) and check.p < 1e-4
    # The pooled verdict: established; within class A alone the same decision is not.
    within = {r.what: r for r in prov.within}
    assert within["headline"].verdict_all == "gain established" == stats.headlines[0].verdict
    sub = _mixed().final.filter(pl.col("seed") < 6), _mixed().runs.filter(pl.col("seed") < 6)
    alone = analyze(*sub, grid="g")
    assert within["headline"].verdict_within == alone.headlines[0].verdict != "gain established"
    assert within["headline"].n_within == 6 and not within["headline"].holds
    assert within["fixed_v"].verdict_within == alone.assessments[0].verdict
    # The pooled statistics are untouched: the same report without any hardware column.
    plain = compute_stats(Frames(_mixed().final, _mixed().runs.drop("hardware")), grid="g")
    assert (
        plain.to_frame()
        .drop(plain.to_frame().columns[-4:])
        .equals(stats.to_frame().drop(stats.to_frame().columns[-4:]))
    )


def test_a_straddling_pair_makes_its_comparisons_imbalanced():
    stats = compute_stats(_mixed({("rd_attnres", 0): B}), grid="g")
    prov = stats.provenance
    tp = [s for s in prov.straddling if s.comparison == "rd_attnres - block_attnres"]
    assert [(s.seed, s.class_first, s.class_second) for s in tp] == [(0, B, A)]
    bal = next(b for b in prov.balance if b.comparison == "rd_attnres - block_attnres")
    assert bal.table == ((A, 5, 6), (B, 5, 4)) and not bal.balanced
    # Fisher's exact two-sided p, summed by hand: the first variant's runs on A given the margins are
    # hypergeometric (20 runs, 11 on A, 10 of the first variant); sum every table no likelier than this one.
    law = st.hypergeom(20, 11, 10)
    pmf = law.pmf(np.arange(11))
    assert bal.p == pytest.approx(pmf[pmf <= law.pmf(5) * (1 + 1e-7)].sum(), rel=1e-9)
    rows = {
        r.hardware: r
        for r in next(c for c in prov.checks if c.comparison == "rd_attnres - block_attnres").rows
    }
    assert rows[STRADDLING].n == 1 and rows[STRADDLING].mean == pytest.approx(D_A[0], abs=1e-12)
    assert rows[A].n == 5 and rows[B].n == 4  # the straddling pair is in neither class
    fv = next(b for b in prov.balance if b.comparison == "fixed_v - block_attnres")
    assert fv.balanced and fv.table == ((A, 6, 6), (B, 4, 4))
    csv = stats.to_frame().filter(pl.col("comparison") == "rd_attnres - block_attnres").row(0, named=True)
    assert (csv["hardware_balanced"], csv["straddling_pairs"]) == (False, 1)
    assert csv["hardware_classes"] == f"{A}: 5 vs 6; {B}: 5 vs 4"


def test_three_classes_use_pearsons_chi_square():
    c = "cuda-nvidia-a100/tf32/torch2.5.1/eager"
    hw = {f"f{i}": x for i, x in enumerate([A] * 4 + [B] * 1 + [c] * 1)}
    hw |= {f"s{i}": x for i, x in enumerate([A] * 1 + [B] * 3 + [c] * 2)}
    pairs = [Pair("x - y", "small", 1, i, f"f{i}", f"s{i}", 3.0, 3.0, 0.0) for i in range(6)]
    bal = class_balance("x - y", "small", 1, pairs, hw)
    obs = np.array([[4, 1, 1], [1, 3, 2]], float)
    exp = obs.sum(1, keepdims=True) * obs.sum(0, keepdims=True) / obs.sum()
    chi2 = ((obs - exp) ** 2 / exp).sum()
    assert bal.test == "chi-square" and bal.p == pytest.approx(st.chi2.sf(chi2, 2), rel=1e-12)
    assert not bal.balanced


def test_one_class_and_runs_before_the_record():
    frames = _mixed({(v, s): A for v in ("block_attnres", "rd_attnres", "fixed_v") for s in range(10)})
    prov = compute_stats(frames, grid="g").provenance
    assert not prov.mixed and prov.classes == ((A, 30),) and prov.checks == () and prov.within == ()
    assert all(b.balanced and math.isnan(b.p) for b in prov.balance)
    # Result files written before the record: no column, NULL or empty, all read as 'unknown'.
    old = frames.runs.drop("hardware")
    assert set(hardware_by_run(old).values()) == {UNKNOWN}
    nulls = frames.runs.with_columns(hardware=pl.when(pl.col("seed") < 5).then(None).otherwise(pl.lit("")))
    assert set(hardware_by_run(nulls).values()) == {UNKNOWN}
    prov = compute_stats(Frames(frames.final, nulls), grid="g").provenance
    assert prov.all_unknown and not prov.mixed and prov.classes == ((UNKNOWN, 30),)


def test_a_largest_class_without_the_parent_says_it_cannot_decide():
    """Every parent run on B, the rest on A: the largest class (A) has no parent, so no verdict is re-decided;
    the report says why instead of a table, and every pair straddles."""
    frames = _mixed(
        {("block_attnres", s): B for s in range(10)}
        | {(v, s): A for v in ("rd_attnres", "fixed_v") for s in range(10)}
    )
    stats = compute_stats(frames, grid="g")
    prov = stats.provenance
    assert prov.largest == A and prov.within == ()
    assert prov.within_note.startswith(f"the runs of {A} alone could not be analysed: ")
    assert len([s for s in prov.straddling if s.comparison == "rd_attnres - block_attnres"]) == 10
    md = render_markdown(stats, [])
    assert prov.within_note in md and "| headline |" not in md
