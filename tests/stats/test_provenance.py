"""Where a grid's runs ran (harness/report/stats/provenance.py and class_tests.py, DESIGN 13): hardware classes, balance, straddling
pairs, the variant x hardware check and every verdict within the largest class.

Each statistic against an independent computation: Welch's F against statsmodels, the agreement test's
permutation p against scipy's permutation_test (exact enumeration), the balance test against scipy's binomial
test (two classes) and a brute-force enumeration of every straddling pair's orientation (three), the
re-decision power against statsmodels' TTestPower. The floor, the collision of a class named like a row label,
a zero-spread class and stats.csv's JSON classes. CPU only, a few seconds."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import polars as pl
import pytest
import scipy.stats as st
from statsmodels.stats.oneway import anova_oneway
from statsmodels.stats.power import TTestPower

from harness.common.terms import UNKNOWN
from harness.report.build import Frames, compute_stats
from harness.report.render.sections import render_markdown
from harness.report.simulation.synthetic import frames_from_values
from harness.report.stats.analysis import analyze
from harness.report.stats.class_tests import class_agreement, orientation_test, welch_anova
from harness.report.stats.pairing import Pair
from harness.report.stats.provenance import (
    NO_TEST_RAN,
    NOTHING_TO_HOLD,
    TOO_FEW,
    class_balance,
    class_check,
    hardware_by_run,
    within_status,
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
    assert check.tested == (A, B) and (check.f, check.df2) == pytest.approx(
        (ref.statistic, ref.df[1]), rel=1e-8
    )
    # 6 + 4 pairs: 210 relabellings, the observed one the most extreme: the exact permutation p is 1/210
    assert check.exact and check.p == pytest.approx(1 / 210) and check.min_p == pytest.approx(1 / 210)
    assert check.holm_p == pytest.approx(min(1.0, check.p * sum(math.isfinite(c.p) for c in prov.checks)))
    assert check.disagree and check.level == pytest.approx(
        0.05 / sum(math.isfinite(c.p) for c in prov.checks)
    )
    # The pooled verdict: established; within class A alone the same decision is not, and at 6 pairs of sd
    # 0.0037 against a pooled gain of -0.041 (sd 0.053) the class had little power: not re-decidable, not NO.
    within = {r.what: r for r in prov.within}
    assert within["headline"].verdict_all == "gain established" == stats.headlines[0].verdict
    sub = _mixed().final.filter(pl.col("seed") < 6), _mixed().runs.filter(pl.col("seed") < 6)
    alone = analyze(*sub, grid="g")
    assert within["headline"].verdict_within == alone.headlines[0].verdict != "gain established"
    assert within["headline"].n_within == 6 and not within["headline"].holds
    h = stats.headlines[0]
    power = TTestPower().power(effect_size=abs(h.mean) / h.sd, nobs=6, alpha=0.05, alternative="larger")
    assert within["headline"].power == pytest.approx(power, rel=1e-9) and power < 0.8
    assert within["headline"].status == "not re-decidable at 6 pairs"
    assert within["fixed_v"].verdict_within == alone.assessments[0].verdict
    # The pooled statistics are untouched: the same report without any hardware column.
    plain = compute_stats(Frames(_mixed().final, _mixed().runs.drop("hardware")), grid="g")
    hardware = [c for c in stats.to_frame().columns if c.startswith("hardware_") or c == "straddling_pairs"]
    assert plain.to_frame().drop(hardware).equals(stats.to_frame().drop(hardware))


def test_a_straddling_pair_makes_its_comparisons_imbalanced():
    stats = compute_stats(_mixed({("rd_attnres", 0): B}), grid="g")
    prov = stats.provenance
    tp = [s for s in prov.straddling if s.comparison == "rd_attnres - block_attnres"]
    assert [(s.seed, s.class_first, s.class_second) for s in tp] == [(0, B, A)]
    bal = next(b for b in prov.balance if b.comparison == "rd_attnres - block_attnres")
    assert bal.table == ((A, 5, 6), (B, 5, 4)) and not bal.balanced
    # one straddling pair, first on B: its orientation is one fair coin, p 1 (Fisher's exact test on the runs
    # counted the pair's two runs as independent draws)
    assert bal.oriented == (((B, A), 1),) and bal.p == 1.0 and "sign test" in bal.test
    rows = {
        r.hardware: r
        for r in next(c for c in prov.checks if c.comparison == "rd_attnres - block_attnres").rows
    }
    assert rows[None].straddling and rows[None].n == 1 and rows[None].mean == pytest.approx(D_A[0], abs=1e-12)
    assert rows[A].n == 5 and rows[B].n == 4  # the straddling pair is in neither class
    fv = next(b for b in prov.balance if b.comparison == "fixed_v - block_attnres")
    assert fv.balanced and fv.table == ((A, 6, 6), (B, 4, 4))
    csv = stats.to_frame().filter(pl.col("comparison") == "rd_attnres - block_attnres").row(0, named=True)
    assert (csv["hardware_balanced"], csv["straddling_pairs"]) == (False, 1)
    assert json.loads(csv["hardware_classes"]) == {A: [5, 6], B: [5, 4]}
    assert csv["hardware_balance_p"] == 1.0


def test_the_balance_test_judges_the_straddling_pairs_as_pairs():
    """Two classes: the sign test (scipy's exact binomial test) on which side ran where; three: every
    orientation of every straddling pair enumerated by brute force (2^n patterns), Bowker's statistic as the
    order. Pairs on one class do not enter: they add a run of each side to their class."""
    c = "cuda-nvidia-a100/tf32/torch2.5.1/eager"
    assert orientation_test({(A, B): 7, (B, A): 1}) == pytest.approx(
        st.binomtest(7, 8, 0.5).pvalue, rel=1e-12
    )
    assert orientation_test({(A, B): 3}) == pytest.approx(st.binomtest(3, 3, 0.5).pvalue, rel=1e-12)
    assert orientation_test({}) == 1.0
    oriented = {(A, B): 4, (B, A): 1, (A, c): 3, (c, B): 2, (B, c): 0}
    pairs = [k for k, m in oriented.items() for _ in range(m)]

    def bowker(sides) -> float:
        counts = {}
        for (a, b), flip in zip(pairs, sides, strict=True):
            key = tuple(sorted((a, b)))
            first_on_low = (a == key[0]) != flip
            up, down = counts.get(key, (0, 0))
            counts[key] = (up + first_on_low, down + (not first_on_low))
        return sum((x - y) ** 2 / (x + y) for x, y in counts.values())

    observed = bowker([False] * len(pairs))
    patterns = list(itertools.product([False, True], repeat=len(pairs)))
    brute = sum(bowker(p) >= observed - 1e-9 for p in patterns) / len(patterns)
    assert orientation_test(oriented) == pytest.approx(brute, rel=1e-9)
    # through class_balance: the straddling pairs of a comparison, three classes
    hw = {f"f{i}": x for i, x in enumerate([A] * 4 + [B] * 1 + [c] * 1 + [A] * 3)}
    hw |= {f"s{i}": x for i, x in enumerate([B] * 4 + [A] * 1 + [A] * 1 + [A] * 3)}
    pairs = [Pair("x - y", "small", 1, i, f"f{i}", f"s{i}", 3.0, 3.0, 0.0) for i in range(9)]
    bal = class_balance("x - y", "small", 1, pairs, hw)
    assert bal.oriented == tuple(sorted([((A, B), 4), ((B, A), 1), ((c, A), 1)])) and not bal.balanced
    assert bal.test == "exact symmetry test" and bal.p == pytest.approx(
        orientation_test({(A, B): 4, (B, A): 1, (c, A): 1})
    )


def test_the_agreement_test_is_scipys_permutation_test_of_welchs_f():
    rng = np.random.default_rng(3)
    groups = [rng.normal(0.0, 0.01, 6), rng.normal(0.015, 0.02, 4), rng.normal(-0.005, 0.01, 3)]

    def welch_f(*g):
        return anova_oneway(list(g), use_var="unequal", welch_correction=True).statistic

    for k in (2, 3):
        got = class_agreement(groups[:k])
        ref = st.permutation_test(
            groups[:k], welch_f, permutation_type="independent", n_resamples=np.inf, alternative="greater"
        )
        if got.exact:  # 6 + 4: 210 relabellings, every one counted
            assert got.p_permutation == pytest.approx(ref.pvalue, rel=1e-12) and got.draws == 210
        else:  # 6 + 4 + 3: 60,060 relabellings, 9,999 seeded draws: within 4 binomial SEs of the exact p
            se = math.sqrt(ref.pvalue * (1 - ref.pvalue) / got.draws)
            assert abs(got.p_permutation - ref.pvalue) < 4 * se and got.min_p == 1 / 10_000
        assert got.f == pytest.approx(welch_f(*groups[:k]), rel=1e-10)
        # spreads free: Welch's F on (k - 1, smallest class - 1) df; with two classes Welch's t on 2 df (Hsu)
        smallest = min(g.size for g in groups[:k])
        assert got.p_spread == pytest.approx(st.f.sf(got.f, k - 1, smallest - 1), rel=1e-12)
        assert got.p == max(got.p_permutation, got.p_spread)
    t = st.ttest_ind(groups[0], groups[1], equal_var=False)
    two = class_agreement(groups[:2])
    assert two.p_spread == pytest.approx(2 * st.t.sf(abs(t.statistic), 3), rel=1e-10)  # min(6, 4) - 1 = 3 df
    assert class_agreement(groups[:2]) == class_agreement(groups[:2])  # the same bytes every build
    assert class_agreement(groups) == class_agreement(groups)


def test_classes_below_the_floor_say_too_few_pairs_to_tell_and_a_class_named_straddling_stays_a_class():
    """18:2 and 6/4/2 splits: the 2-pair class enters no test and says so; a class whose name is the report's
    word for the straddling pairs is still a class of its own; a zero-spread class is named, not dropped."""
    rng = np.random.default_rng(9)
    d = rng.normal(0.0, 0.01, 30)

    def pairs_on(classes: list[str], straddle: int = 0):
        hw, pairs = {}, []
        for i, name in enumerate(classes + [A] * straddle):
            hw[f"f{i}"], hw[f"s{i}"] = name, (name if i < len(classes) else B)
            pairs.append(Pair("x - y", "small", 1, i, f"f{i}", f"s{i}", 3.0, 3.0, float(d[i])))
        return pairs, hw

    pairs, hw = pairs_on([A] * 18 + [B] * 2)
    check = class_check("x - y", "k", "small", 1, pairs, hw)
    assert check.tested == () and math.isnan(check.p) and check.note.startswith(TOO_FEW)
    assert {r.hardware: r.status for r in check.rows} == {A: NO_TEST_RAN, B: TOO_FEW}  # no test: not "tested"
    assert not check.unreachable  # the reason is the 2-pair class, not the test's reach
    c = "cuda-nvidia-a100/tf32/torch2.5.1/eager"
    pairs, hw = pairs_on([A] * 6 + [B] * 4 + [c] * 2)
    check = class_check("x - y", "k", "small", 1, pairs, hw)
    assert (
        check.tested == (A, B)
        and math.isfinite(check.p)
        and dict((r.hardware, r.status) for r in check.rows)[c] == TOO_FEW
    )
    assert check.p == class_agreement([d[:6], d[6:10]]).p  # the test is over the classes at the floor only
    pairs, hw = pairs_on(["straddling"] * 4 + [B] * 4, straddle=2)
    check = class_check("x - y", "k", "small", 1, pairs, hw)
    rows = [(r.hardware, r.straddling, r.n) for r in check.rows]
    assert rows == [(B, False, 4), ("straddling", False, 4), (None, True, 2)]
    assert check.tested == (B, "straddling")
    hw_flat = dict(hw)
    flat = [
        Pair(
            p.comparison,
            p.size,
            1,
            p.seed,
            p.run_first,
            p.run_second,
            3.0,
            3.0,
            0.0 if p.seed < 4 else p.diff,
        )
        for p in pairs
    ]
    check = class_check("x - y", "k", "small", 1, flat, hw_flat)
    assert dict((r.hardware, r.status) for r in check.rows)["straddling"] == "zero spread" and math.isnan(
        check.p
    )
    assert "zero spread" in check.note
    # 3 + 3 pairs: 20 relabellings, 2 as extreme as any: the smallest p is 0.1, so no test can reject
    pairs, hw = pairs_on([A] * 3 + [B] * 3)
    check = class_check("x - y", "k", "small", 1, pairs, hw)
    assert math.isnan(check.p) and check.note.startswith(f"{TOO_FEW}: the smallest p") and "0.1" in check.note
    assert check.tested == () and {r.status for r in check.rows} == {NO_TEST_RAN}
    assert check.unreachable and check.min_p == pytest.approx(0.1, rel=1e-12)


def test_a_verdict_lost_to_power_is_not_re_decidable_and_one_decided_otherwise_is_no():
    assert within_status("gain established", "gain established", 6, 0.9, 0.8) == "yes"
    assert within_status("gain established", "undecided", 6, 0.4, 0.8) == "not re-decidable at 6 pairs"
    assert within_status("gain established", "undecided", 6, 0.95, 0.8) == "NO"  # it had the power
    assert (
        within_status("reproduces gain", "does not reproduce gain", 6, 0.1, 0.8) == "NO"
    )  # decided otherwise
    assert within_status("undecided", "gain established", 6, math.nan, 0.8) == "NO"
    assert within_status("undecided", "no pairs in this class", 0, math.nan, 0.8) == TOO_FEW


def test_a_re_decision_on_too_few_pairs_or_of_a_verdict_that_decided_nothing_does_not_hold():
    """Under 3 pairs the class re-decides nothing, whatever words it reads; a pooled verdict that decided nothing
    (undecided, not assessed, an A/A pass) has nothing to hold, even where the class reads the same words."""
    assert within_status("undecided", "undecided", 1, math.nan, 0.8) == TOO_FEW
    assert within_status("gain established", "gain established", 2, math.nan, 0.8) == TOO_FEW
    assert within_status("gain established", "undecided", 2, math.nan, 0.8) == TOO_FEW
    assert within_status("undecided", "undecided", 6, math.nan, 0.8) == NOTHING_TO_HOLD
    assert within_status("pass", "pass", 6, math.nan, 0.8) == NOTHING_TO_HOLD
    assert within_status("undecided", "gain established", 3, math.nan, 0.8) == "NO"  # decided otherwise
    assert within_status("gain established", "gain established", 3, 0.5, 0.8) == "yes"


def _on(classes: list[str], d: list[float], dc: list[float]) -> Frames:
    """Parent, treatment (parent + ``d``) and a control (parent + ``dc``), seed s on ``classes[s]``."""
    n = len(classes)
    values = {
        "block_attnres": PARENT[:n],
        "rd_attnres": [p + x for p, x in zip(PARENT, d, strict=False)],
        "fixed_v": [p + x for p, x in zip(PARENT, dc, strict=False)],
    }
    frames = frames_from_values(values, grid="g")
    hw = [classes[s] for s in frames["runs"]["seed"].to_list()]
    return Frames(frames["final"], frames["runs"].with_columns(hardware=pl.Series(hw)))


def test_classes_whose_3_3_pairs_cannot_reach_alpha_are_said_so_and_not_shown_in_a_test():
    """6 seeds, 3 on each class: each class has the 3 pairs of the floor, but 3 + 3 pairs give 20 relabellings,
    2 as extreme as any: the smallest p is 0.1, so no test runs. The banner gives that reason (not "no comparison
    has two classes with >= 3 pairs", which is false here) and no class reads "in the test: yes"."""
    d = [-0.031, -0.028, -0.035, -0.030, -0.026, -0.033]
    dc = [-0.008, -0.007, -0.009, -0.0075, -0.0065, -0.0085]
    stats = compute_stats(_on(["clsA"] * 3 + ["clsB"] * 3, d, dc), grid="g")
    prov = stats.provenance
    assert len(prov.checks) == 3
    for c in prov.checks:
        assert c.tested == () and c.unreachable and c.min_p == pytest.approx(0.1, rel=1e-12)
        assert [(r.hardware, r.n, r.status) for r in c.rows] == [
            ("clsA", 3, NO_TEST_RAN),
            ("clsB", 3, NO_TEST_RAN),
        ]
    md = render_markdown(stats, [])
    banner = next(x for x in md.splitlines() if x.startswith("> Hardware:"))
    assert (
        "No agreement test ran: 3 comparison(s) have classes whose 3/3 pairs cannot reach p < 0.05 (smallest p "
        "0.1): too few pairs to tell whether the hardware moved any comparison."
    ) in banner
    assert "No comparison has two classes" not in md
    table = md[md.index("### Variant x hardware") : md.index("### Every verdict")]
    assert (
        "| rd_attnres - block_attnres | small, 1M | on one class | clsA | 3 | -0.0313 [-0.0401, -0.0226] | "
        "no: no test ran | too few pairs to tell: the smallest p 2 classes of 3/3 pairs can give is 0.1 |"
    ) in table
    assert "| on one class | clsB | 3 | -0.0297 [-0.0384, -0.0209] | no: no test ran |  |" in table
    assert "| yes |" not in table


def test_a_tested_grid_names_the_comparisons_whose_classes_cannot_reach_alpha():
    """7 seeds, 0-3 on A and 4-6 on B, the treatment's seed 3 on B: the control's comparison has 4 + 3 pairs
    (35 relabellings, smallest p 1/35) and is tested; the treatment's two comparisons keep 3 + 3 one-class
    pairs (the straddling pair in no test): smallest p 0.1, said so beside the test that ran."""
    d = [-0.031, -0.028, -0.035, -0.030, -0.026, -0.033, -0.029]
    dc = [-0.008, -0.007, -0.009, -0.0075, -0.0065, -0.0085, -0.0078]
    frames = _on([A] * 4 + [B] * 3, d, dc)
    hw = [
        B if (v, s) == ("rd_attnres", 3) else h
        for v, s, h in frames.runs.select("variant", "seed", "hardware").iter_rows()
    ]
    stats = compute_stats(Frames(frames.final, frames.runs.with_columns(hardware=pl.Series(hw))), grid="g")
    prov = stats.provenance
    ran = [c for c in prov.checks if math.isfinite(c.p)]
    assert [c.comparison for c in ran] == ["fixed_v - block_attnres"] and ran[0].min_p == pytest.approx(
        1 / 35
    )
    assert sorted(c.comparison for c in prov.checks if c.unreachable) == [
        "rd_attnres - block_attnres",
        "rd_attnres - fixed_v",
    ]
    banner = next(x for x in render_markdown(stats, []).splitlines() if x.startswith("> Hardware:"))
    assert (
        "; 2 comparison(s) have classes whose 3/3 pairs cannot reach p < 0.05 (smallest p 0.1) (too few pairs "
        "to tell). Each class's"
    ) in banner


def test_a_verdict_re_decided_on_one_pair_holds_nowhere_and_tied_classes_are_not_called_the_largest():
    """3 seeds, each on its own class: every class holds 1 pair and 3 finished runs. The re-decision on the
    first class's 1 pair reads the pooled words ("undecided") but decided nothing: too few pairs to tell, not
    "yes", and not counted among the verdicts that hold; no class is "the largest": the tie is said."""
    stats = compute_stats(_on(["clsA", "clsB", "clsC"], [-0.03, 0.02, -0.01], [0.01, -0.02, 0.005]), grid="g")
    prov = stats.provenance
    assert prov.classes == (("clsA", 3), ("clsB", 3), ("clsC", 3)) and prov.largest == "clsA"
    assert prov.tied == ("clsB", "clsC")
    within = {r.what: r for r in prov.within}
    assert within["headline"].verdict_all == within["headline"].verdict_within == "undecided"
    assert within["headline"].n_within == 1 and within["headline"].status == TOO_FEW
    assert not any(r.holds for r in prov.within)
    md = render_markdown(stats, [])
    section = md[md.index("### Every verdict") :]
    tie = "clsA (tied with clsB, clsC at 3 finished runs each; the first by name)"
    assert section.startswith(f"### Every verdict within {tie}\n")
    assert "| small, 1M | headline | undecided | undecided | 1 | - | too few pairs to tell |" in section
    assert (
        "0 of 2 verdict(s) hold within clsA; 0 not re-decidable at its pairs; 2 with too few pairs to tell "
        "(under 3 pairs in the class); 0 do not hold."
    ) in section
    banner = next(x for x in md.splitlines() if x.startswith("> Hardware:"))
    assert f"every verdict within {tie} are in the Provenance section." in banner
    assert "the largest class" not in banner and "largest class (" not in md


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
