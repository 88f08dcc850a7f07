"""Paired statistics of the report (reports/stats.py, reports/pairing.py; DESIGN section 6).

Every number in stats.csv is checked against an independent computation written here
(scipy distributions, brute-force enumeration of the exact Wilcoxon null, a hand-written
Holm step-down), and the Holm and TOST values also against statsmodels. CPU only, ~5 s:

    python -m pytest -q tests/test_stats.py
"""

from __future__ import annotations

import io
import itertools
import json
import math

import numpy as np
import polars as pl
import pytest
import scipy.stats as st
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.power import TTestPower
from statsmodels.stats.weightstats import ttost_paired

from reports.pairing import ProtocolMismatchError, config_diff
from reports.stats import CSV_COLUMNS, analyze, min_achievable_p, paired_test, tost_p
from reports.synthetic import frames_from_values

ALPHA = 0.05
PARENT = np.array([3.512, 3.498, 3.530, 3.505, 3.521])
D_TREAT = np.array([-0.031, -0.028, -0.035, -0.022, -0.030])  # treatment - parent, nats/token
NOISE = np.array([0.001, -0.002, 0.0005, 0.0015, -0.001])


def fixed_values() -> dict[str, list[float]]:
    """Five seeds; controls built to give each verdict by construction."""
    return {
        "block_attnres": list(PARENT),
        "rd_attnres": list(PARENT + D_TREAT),
        "param_matched": list(PARENT + D_TREAT + NOISE),  # same gain as the treatment: reproduces
        "dup_route": list(PARENT + NOISE),  # no gain: does not reproduce
        "fixed_v": list(PARENT + np.array([-0.04, 0.03, -0.05, 0.02, -0.01])),  # noisy: inconclusive
        "dup_route_tied": list(PARENT),  # the A/A check: exactly the parent
    }


# --------------------------------------------------------------------------- independent reference


def exact_wilcoxon_enum(d: np.ndarray) -> float:
    """Two-sided exact signed-rank p by enumerating all 2^n sign flips (midranks, zeros dropped)."""
    d = d[d != 0]
    ranks = st.rankdata(np.abs(d))
    t_obs = ranks[d > 0].sum()
    null = np.array([ranks[np.array(s, bool)].sum() for s in itertools.product([0, 1], repeat=d.size)])
    return min(1.0, 2 * min(np.mean(null <= t_obs + 1e-9), np.mean(null >= t_obs - 1e-9)))


def reference(x1: np.ndarray, x2: np.ndarray) -> dict[str, float]:
    d = x1 - x2
    n = d.size
    mean, sd = d.mean(), d.std(ddof=1)
    half = st.t.ppf(1 - ALPHA / 2, n - 1) * sd / math.sqrt(n)
    k_neg, k_pos = int((d < 0).sum()), int((d > 0).sum())
    return {
        "n_pairs": n, "mean_diff": mean, "ci_low": mean - half, "ci_high": mean + half,
        "t_p": st.ttest_1samp(d, 0.0).pvalue, "wilcoxon_p": exact_wilcoxon_enum(d),
        "sign_p": st.binomtest(min(k_neg, k_pos), k_neg + k_pos, 0.5).pvalue,
        "d_z": mean / sd, "ppl_change": math.exp(mean) - 1, "wins": f"{k_neg}/{n}",
    }


def holm_by_hand(p: list[float]) -> list[float]:
    order = np.argsort(p)
    m, running, out = len(p), 0.0, [0.0] * len(p)
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[i]))
        out[i] = running
    return out


def tost_by_hand(d: np.ndarray, margin: float) -> float:
    n = d.size
    se = d.std(ddof=1) / math.sqrt(n)
    return max(st.t.sf((d.mean() + margin) / se, n - 1), st.t.cdf((d.mean() - margin) / se, n - 1))


def csv_roundtrip(frame: pl.DataFrame) -> pl.DataFrame:
    return pl.read_csv(io.StringIO(frame.write_csv()))


# --------------------------------------------------------------------------- tests


def test_stats_csv_matches_independent_computation():
    vals = fixed_values()
    frames = frames_from_values(vals)
    res = analyze(frames["final"], frames["runs"])
    table = csv_roundtrip(res.to_frame())
    assert tuple(table.columns[: len(CSV_COLUMNS)]) == CSV_COLUMNS
    rows = {r["comparison"]: r for r in table.iter_rows(named=True)}
    family = [c for c in rows if c != "dup_route_tied - block_attnres"]  # all-zero row checked below
    assert len(rows) == 9  # 1 + 4 controls vs parent + 4 treatment vs control
    for label in family:
        first, second = label.split(" - ")
        ref = reference(np.array(vals[first]), np.array(vals[second]))
        row = rows[label]
        for key, want in ref.items():
            if isinstance(want, str):
                assert row[key] == want, (label, key)
            else:
                assert row[key] == pytest.approx(want, abs=1e-12, rel=1e-12), (label, key, row[key], want)
        assert row["seeds"] == "0 1 2 3 4"
        assert row["wilcoxon_min_p"] == row["sign_min_p"] == 0.0625  # 2**(1-5)

    # Holm over the 9 finite t-test p-values of the family (the A/A row has p = 1 by convention).
    labels = list(rows)
    p = [rows[c]["t_p"] for c in labels]
    assert rows["dup_route_tied - block_attnres"]["t_p"] == 1.0
    want_sm = multipletests(p, alpha=ALPHA, method="holm")[1]
    want_hand = holm_by_hand(p)
    for label, w_sm, w_hand in zip(labels, want_sm, want_hand):
        assert rows[label]["holm_p"] == pytest.approx(w_sm, abs=1e-12)
        assert rows[label]["holm_p"] == pytest.approx(w_hand, abs=1e-12)
        assert rows[label]["family_size"] == 9

    # TOST of each control vs parent, margin |G|/2 with G the treatment-minus-parent mean.
    g = np.mean(np.array(vals["rd_attnres"]) - np.array(vals["block_attnres"]))
    for control in ("param_matched", "dup_route", "fixed_v"):
        row = rows[f"{control} - block_attnres"]
        x1, x2 = np.array(vals[control]), np.array(vals["block_attnres"])
        assert row["tost_margin"] == pytest.approx(abs(g) / 2, abs=1e-15)
        assert row["tost_p"] == pytest.approx(ttost_paired(x1, x2, -abs(g) / 2, abs(g) / 2)[0], abs=1e-12)
        assert row["tost_p"] == pytest.approx(tost_by_hand(x1 - x2, abs(g) / 2), abs=1e-12)
    assert math.isnan(rows["rd_attnres - block_attnres"]["tost_p"])  # TOST only for controls


def test_verdicts_follow_the_rule_and_power_plan():
    vals = fixed_values()
    frames = frames_from_values(vals)
    res = analyze(frames["final"], frames["runs"])
    rows = {r["comparison"]: r for r in res.to_frame().iter_rows(named=True)}

    def sig_below(label):
        return rows[label]["holm_p"] < ALPHA and rows[label]["mean_diff"] < 0

    # The rule applied here, on the table's own numbers.
    for control in ("param_matched", "dup_route", "fixed_v", "dup_route_tied"):
        cp, tc = f"{control} - block_attnres", f"rd_attnres - {control}"
        reproduces = sig_below(cp) and not sig_below(tc)
        not_reproduce = sig_below(tc) or rows[cp]["tost_p"] < ALPHA
        want = ("reproduces gain" if reproduces and not not_reproduce else
                "does not reproduce gain" if not_reproduce and not reproduces else "inconclusive")
        assert rows[cp]["verdict"] == want
        assert rows[tc]["verdict"] == ""
    # ...and the outcomes the data were built for.
    assert rows["param_matched - block_attnres"]["verdict"] == "reproduces gain"
    assert rows["dup_route - block_attnres"]["verdict"] == "does not reproduce gain"
    assert rows["dup_route_tied - block_attnres"]["verdict"] == "does not reproduce gain"
    inc = rows["fixed_v - block_attnres"]
    assert inc["verdict"] == "inconclusive"

    # Power plan: the candidate needing fewest pairs (TTestPower, power 0.8).
    m = inc["family_size"]
    tc = rows["rd_attnres - fixed_v"]
    cands = {
        "paired t-test fixed_v - block_attnres": TTestPower().solve_power(
            effect_size=abs(inc["d_z"]), alpha=ALPHA / m, power=0.8, alternative="two-sided"),
        "paired t-test rd_attnres - fixed_v": TTestPower().solve_power(
            effect_size=abs(tc["d_z"]), alpha=ALPHA / m, power=0.8, alternative="two-sided"),
    }
    best = min(cands, key=cands.get)
    assert inc["deciding_test"].startswith(best)
    assert inc["seeds_needed"] == math.ceil(cands[best])
    assert inc["more_seeds"] == math.ceil(cands[best]) - 5


def test_null_false_positive_rate():
    """No true difference, 1000 draws of 5 pairs: t-test rejects at ~alpha; exact tests never can."""
    rng = np.random.default_rng(20240611)
    t_rej = w_rej = s_rej = 0
    for _ in range(1000):
        base = rng.normal(3.5, 0.02, 5)
        res = paired_test(base + rng.normal(0, 0.003, 5), base + rng.normal(0, 0.003, 5))
        t_rej += res.t_p < ALPHA
        w_rej += res.wilcoxon_p < ALPHA
        s_rej += res.sign_p < ALPHA
    assert 0.03 <= t_rej / 1000 <= 0.07
    assert w_rej == s_rej == 0  # min achievable p with 5 pairs is 0.0625 > alpha


def test_protocol_mismatch_is_an_error_naming_fields():
    frames = frames_from_values(fixed_values())
    bad_cfg = json.dumps({"variant": "rd_attnres", "seed": 2, "size": "small", "budget_tokens": 1_000_000,
                          "train": {"lr": 1e-3}})
    sel = pl.col("run_id") == "rd_attnres-s2"
    new_hash = pl.when(sel).then(pl.lit("p1")).otherwise(pl.col("protocol_hash")).alias("protocol_hash")
    runs = frames["runs"].with_columns(new_hash,
                                       pl.when(sel).then(pl.lit(bad_cfg)).otherwise(pl.col("config")).alias("config"))
    final = frames["final"].with_columns(new_hash)
    # first = rd_attnres (lr 0.001), second = block_attnres (lr 0.003)
    with pytest.raises(ProtocolMismatchError, match=r"seed=2: protocol_hash p1 \(run rd_attnres-s2\) != p0 "
                       r"\(run block_attnres-s2\); differing fields: train\.lr: 0\.001 != 0\.003"):
        analyze(final, runs)

    res = analyze(final, runs, allow_partial=True)
    rows = {r["comparison"]: r for r in res.to_frame().iter_rows(named=True)}
    tp = rows["rd_attnres - block_attnres"]
    assert tp["n_pairs"] == 4 and tp["seeds"] == "0 1 3 4"
    assert "seed 2 (protocol mismatch: train.lr" in tp["missing_seeds"]
    assert any("protocol mismatch" in w and "train.lr" in w for w in res.warnings)
    assert any(lo.run_id == "rd_attnres-s2|block_attnres-s2" for lo in res.left_out)
    # The 4 remaining pairs give exactly the 4-pair statistics.
    vals = fixed_values()
    keep = [0, 1, 3, 4]
    ref = reference(np.array(vals["rd_attnres"])[keep], np.array(vals["block_attnres"])[keep])
    assert tp["t_p"] == pytest.approx(ref["t_p"], abs=1e-12)
    assert tp["wilcoxon_min_p"] == 0.125


def test_config_diff_names_fields_and_skips_variant():
    a = json.dumps({"variant": "x", "train": {"lr": 1, "wd": 0}, "corpus": "c"})
    b = json.dumps({"variant": "y", "train": {"lr": 2, "wd": 0}, "extra": 1, "corpus": "c"})
    assert config_diff(a, b) == ["extra: '<absent>' != 1", "train.lr: 1 != 2"]
    assert config_diff(a, None) == ["config JSON missing or unreadable, fields cannot be compared"]


def test_missing_seeds_failed_and_diverged_runs_are_listed():
    vals = fixed_values()
    frames = frames_from_values(vals)
    # rd_attnres seed 3 failed (not in final); fixed_v seed 1 diverged (NaN in final);
    # dup_route seed 4 never ran.
    runs = frames["runs"].with_columns(
        pl.when(pl.col("run_id") == "rd_attnres-s3").then(pl.lit("failed"))
        .when(pl.col("run_id") == "fixed_v-s1").then(pl.lit("diverged"))
        .otherwise(pl.col("status")).alias("status"),
        pl.when(pl.col("run_id") == "rd_attnres-s3").then(pl.lit("RuntimeError: CUDA OOM"))
        .otherwise(pl.col("error")).alias("error"),
    ).filter(pl.col("run_id") != "dup_route-s4")
    final = (frames["final"].filter(~pl.col("run_id").is_in(["rd_attnres-s3", "dup_route-s4"]))
             .with_columns(pl.when(pl.col("run_id") == "fixed_v-s1").then(float("nan"))
                           .otherwise(pl.col("val_nll")).alias("val_nll")))
    res = analyze(final, runs)
    rows = {r["comparison"]: r for r in res.to_frame().iter_rows(named=True)}
    tp = rows["rd_attnres - block_attnres"]
    assert (tp["n_pairs"], tp["seeds"]) == (4, "0 1 2 4")
    assert tp["missing_seeds"] == "seed 3 (rd_attnres: failed: RuntimeError: CUDA OOM)"
    keep = [0, 1, 2, 4]
    ref = reference(np.array(vals["rd_attnres"])[keep], np.array(vals["block_attnres"])[keep])
    for key in ("mean_diff", "ci_low", "ci_high", "t_p", "wilcoxon_p", "sign_p", "d_z"):
        assert tp[key] == pytest.approx(ref[key], abs=1e-12)
    assert rows["dup_route - block_attnres"]["missing_seeds"] == "seed 4 (dup_route: no run)"
    fv = rows["fixed_v - block_attnres"]
    assert fv["seeds"] == "0 2 3 4" and "seed 1 (fixed_v: diverged" in fv["missing_seeds"]
    both = rows["rd_attnres - fixed_v"]["missing_seeds"]
    assert "seed 1 (fixed_v: diverged" in both and "seed 3 (rd_attnres: failed" in both
    listed = {lo.run_id: lo for lo in res.left_out}
    assert listed["rd_attnres-s3"].reason == "failed: RuntimeError: CUDA OOM"
    assert {"fixed_v-s1"} <= set(listed)  # diverged: listed, not averaged
    assert all(p.run_first != "fixed_v-s1" for p in res.pairs)


def test_fewer_than_three_pairs_is_insufficient_not_a_crash():
    vals = {k: v[:2] for k, v in fixed_values().items()}
    frames = frames_from_values(vals)
    res = analyze(frames["final"], frames["runs"])
    for row in res.to_frame().iter_rows(named=True):
        assert row["n_pairs"] == 2
        for key in ("ci_low", "t_p", "wilcoxon_p", "sign_p", "d_z", "holm_p", "tost_p"):
            assert math.isnan(row[key]), (row["comparison"], key)
        assert "insufficient: 2 pair(s) < 3" in row["note"]
    assert {c.verdict for c in res.verdicts()} == {"insufficient"}
    assert all(a.status == "pass" for a in res.aa_checks)  # exactly 0 still passes, with n noted
    # The treatment's gain could not be tested either: every control verdict says so.
    for c in res.verdicts():
        assert c.caveat == ("the treatment's own gain is not significant (Holm p = n/a: 2 pair(s), the test "
                            "needs >= 3), so this verdict says little about the RD-AttnRes claim")
    # One pair and zero pairs too.
    one = paired_test([1.0], [0.5])
    assert (one.n, one.mean_diff, one.wins, math.isnan(one.t_p)) == (1, 0.5, 0, True)
    none = paired_test([], [])
    assert none.n == 0 and math.isnan(none.mean_diff)


def test_all_zero_differences_are_explained():
    zeros = paired_test([3.5, 3.6, 3.7, 3.4, 3.55], [3.5, 3.6, 3.7, 3.4, 3.55])
    assert (zeros.t_p, zeros.wilcoxon_p, zeros.sign_p) == (1.0, 1.0, 1.0)
    assert (zeros.ci_low, zeros.ci_high, zeros.mean_diff, zeros.ppl_change) == (0.0, 0.0, 0.0, 0.0)
    assert math.isnan(zeros.d_z) and zeros.n_nonzero == 0 and zeros.wilcoxon_method == "none"
    assert "all differences exactly 0" in zeros.note
    # The scipy trap this guards against (scipy 1.17): pratt + exact gives 0.0625 for identical samples.
    assert st.wilcoxon(np.zeros(5), zero_method="pratt", method="exact").pvalue == pytest.approx(0.0625)

    frames = frames_from_values(fixed_values())
    res = analyze(frames["final"], frames["runs"])
    (aa,) = res.aa_checks
    assert (aa.variant, aa.status, aa.max_abs_diff, aa.n_pairs) == ("dup_route_tied", "pass", 0.0, 5)
    assert aa.bit_identical and aa.summary == "bit-identical: all 5 paired differences are exactly 0"
    assert "zero_method='wilcox'" in aa.explanation and "0.0625" in aa.explanation
    row = {r["comparison"]: r for r in res.to_frame().iter_rows(named=True)}["dup_route_tied - block_attnres"]
    assert row["tost_p"] == 0.0  # zero spread, |mean| = 0 < margin: equivalence holds in the limit


def test_aa_check_fails_on_a_systematic_offset():
    vals = fixed_values()
    vals["dup_route_tied"] = list(PARENT - 0.01 + NOISE / 10)
    frames = frames_from_values(vals)
    (aa,) = analyze(frames["final"], frames["runs"]).aa_checks
    assert aa.status == "FAIL" and aa.t_p < ALPHA
    # max |d| = 0.01015 is below |G|/2 = 0.0146: no noise-floor statement, the offset is the finding.
    assert aa.max_abs_diff < aa.noise_threshold and "cannot be told apart" not in aa.explanation


# --------------------------------------------------------------------------- A/A noise floor

P3 = PARENT[:3]
AA_D = np.array([0.004, -0.006, 0.0128])  # A/A - parent: the tester's case, max |d| = 0.0128
TREAT_D = np.array([-0.021, -0.019, -0.020])  # G = -0.02 nats/token


def aa_frames(aa_d, treat_d=TREAT_D, total_steps=None):
    vals = {"block_attnres": list(P3[: len(aa_d)]), "dup_route_tied": list(P3[: len(aa_d)] + aa_d)}
    if treat_d is not None:
        vals["rd_attnres"] = list(P3[: len(aa_d)] + treat_d[: len(aa_d)])
    frames = frames_from_values(vals)
    if total_steps is not None:  # as the runner stores it (harness/runner.py)
        frames["runs"] = frames["runs"].with_columns(
            pl.col("config").str.replace('"train"', f'"total_steps": {total_steps}, "train"'))
    return frames


def test_aa_noise_floor_comparable_to_the_gain_warns():
    frames = aa_frames(AA_D, total_steps=244)
    res = analyze(frames["final"], frames["runs"])
    (aa,) = res.aa_checks
    d_aa = (P3 + AA_D) - P3  # what pairing computes, float for float
    g = float(np.mean((P3 + TREAT_D) - P3))
    assert g == pytest.approx(-0.02, abs=1e-12)
    # The paired test alone passes (scipy, independently): no systematic offset ...
    assert aa.t_p == pytest.approx(st.ttest_1samp(d_aa, 0.0).pvalue, abs=1e-12) and aa.t_p > 0.5
    assert aa.test_status == "pass"
    # ... but the largest A/A difference is at least half the treatment's gain: warn.
    assert aa.max_abs_diff == pytest.approx(0.0128, abs=1e-12) and aa.noise_threshold == pytest.approx(0.01, abs=1e-12)
    assert (aa.status, aa.gain, aa.steps) == ("warn", pytest.approx(g, abs=1e-15), "244")
    assert aa.summary == (
        "A/A differences up to 0.0128 nats/token, the run-to-run numerical noise floor of this protocol "
        "(float summation order diverges chaotically over 244 training steps), are comparable to the "
        "treatment's gain G = -0.0200 nats/token (max |dNLL| >= |G|/2 = 0.01); effects of this size cannot "
        "be told apart from noise at this budget; more seeds or a longer budget are needed")
    assert aa.explanation.startswith(aa.summary) and f"paired t p = {aa.t_p:.3g} >= 0.05" in aa.explanation
    # The DESIGN 6 verdict of the A/A control is computed exactly as before.
    rows = {r["comparison"]: r for r in res.to_frame().iter_rows(named=True)}
    assert rows["dup_route_tied - block_attnres"]["verdict"] == rule_verdict(rows, "dup_route_tied")


def test_aa_noise_floor_below_half_the_gain_passes_and_is_stated():
    frames = aa_frames(AA_D, treat_d=2 * TREAT_D)  # G = -0.04: threshold 0.02 > 0.0128
    (aa,) = analyze(frames["final"], frames["runs"]).aa_checks
    assert (aa.status, aa.test_status) == ("pass", "pass")
    assert aa.noise_threshold == pytest.approx(0.02, abs=1e-12)
    assert "A/A differences up to 0.0128 nats/token over 3 pair(s)" in aa.summary
    assert "below |G|/2 = 0.02 nats/token (G = -0.0400)" in aa.summary
    assert "over the training steps" in aa.summary  # configs without total_steps or batch_tokens


def test_aa_noise_floor_without_a_treatment_uses_1e_3():
    loud = aa_frames(np.array([0.0005, -0.002, 0.001]), treat_d=None)
    (aa,) = analyze(loud["final"], loud["runs"]).aa_checks
    assert math.isnan(aa.gain) and aa.noise_threshold == 1e-3
    assert aa.status == "warn" and "A/A differences up to 0.002 nats/token" in aa.summary
    assert "are at least 0.001 nats/token (no treatment gain G" in aa.summary
    quiet = aa_frames(np.array([0.0002, -0.0004, 0.0003]), treat_d=None)
    (aa,) = analyze(quiet["final"], quiet["runs"]).aa_checks
    assert aa.status == "pass" and "up to 0.0004 nats/token" in aa.summary and "below 0.001" in aa.summary


def test_aa_with_fewer_than_three_pairs_states_its_max():
    frames = aa_frames(np.array([0.004, -0.006]))  # G = -0.02 over 2 pairs: threshold 0.01
    (aa,) = analyze(frames["final"], frames["runs"]).aa_checks
    assert (aa.status, aa.n_pairs) == ("insufficient", 2)
    assert aa.summary.startswith("2 pair(s) < 3: no paired test run; A/A differences up to 0.006 nats/token")
    frames = aa_frames(np.array([0.004, 0.0128]))  # the noise floor is visible even without a test
    (aa,) = analyze(frames["final"], frames["runs"]).aa_checks
    assert (aa.status, aa.test_status) == ("warn", "insufficient")
    assert "A/A differences up to 0.0128 nats/token" in aa.summary and "2 pair(s) < 3" in aa.explanation


def test_aa_fail_stays_fail_and_adds_the_noise_floor():
    frames = aa_frames(np.array([0.015, 0.0151, 0.0149]))  # a systematic offset at the noise-floor scale
    (aa,) = analyze(frames["final"], frames["runs"]).aa_checks
    assert aa.t_p < ALPHA and (aa.status, aa.test_status) == ("FAIL", "FAIL")
    assert aa.summary.startswith("significant difference") and "A/A differences up to 0.0151" in aa.explanation


# --------------------------------------------------------------------------- caveat: gain not significant


def rule_verdict(rows: dict, control: str, treatment: str = "rd_attnres", parent: str = "block_attnres") -> str:
    """DESIGN 6 verdict recomputed from a stats.csv table's own numbers."""
    def sig_below(label):
        return rows[label]["holm_p"] < ALPHA and rows[label]["mean_diff"] < 0

    cp, tc = f"{control} - {parent}", f"{treatment} - {control}"
    reproduces = sig_below(cp) and not sig_below(tc)
    not_reproduce = sig_below(tc) or rows[cp]["tost_p"] < ALPHA
    return ("reproduces gain" if reproduces and not not_reproduce else
            "does not reproduce gain" if not_reproduce and not reproduces else "inconclusive")


def test_non_significant_treatment_marks_every_control_verdict():
    vals = fixed_values()
    d_weak = np.array([-0.010, 0.008, -0.012, 0.006, -0.004])  # mean -0.0024, sd 0.0087
    vals["rd_attnres"] = list(PARENT + d_weak)
    frames = frames_from_values(vals)
    res = analyze(frames["final"], frames["runs"])
    rows = {r["comparison"]: r for r in res.to_frame().iter_rows(named=True)}
    tp = rows["rd_attnres - block_attnres"]
    raw_p = st.ttest_1samp((PARENT + d_weak) - PARENT, 0.0).pvalue
    assert raw_p > 0.5 and tp["holm_p"] >= raw_p  # Holm never lowers a p-value: not significant
    want = (f"the treatment's own gain is not significant (Holm p = {tp['holm_p']:.3g} >= 0.05), "
            "so this verdict says little about the RD-AttnRes claim")
    controls = ("param_matched", "dup_route", "fixed_v", "dup_route_tied")
    for control in controls:
        row = rows[f"{control} - block_attnres"]
        assert row["note"].endswith(want), (control, row["note"])
        assert row["verdict"] == rule_verdict(rows, control)  # the rule itself is unchanged
    assert [c.caveat for c in res.verdicts()] == [want] * 4
    assert all("treatment's own gain" not in r["note"] for r in rows.values() if r["kind"] != "control_vs_parent")
    (warning,) = res.gain_warnings()
    assert warning.startswith("size small, budget 1_000_000 tokens: the treatment's own gain is not significant "
                              f"(rd_attnres - block_attnres: mean dNLL {np.mean(d_weak):+.4f} nats/token, 3/5 "
                              f"pairs won, Holm p = {tp['holm_p']:.3g} >= 0.05)")
    assert "verdicts of dup_route, fixed_v, param_matched, dup_route_tied at this size" in warning


def test_significant_treatment_gives_no_caveat():
    frames = frames_from_values(fixed_values())
    res = analyze(frames["final"], frames["runs"])
    rows = {r["comparison"]: r for r in res.to_frame().iter_rows(named=True)}
    assert rows["rd_attnres - block_attnres"]["holm_p"] < ALPHA
    assert all(c.caveat == "" for c in res.verdicts()) and res.gain_warnings() == []
    assert not any("treatment's own gain" in (r["note"] or "") for r in rows.values())


def test_significantly_worse_treatment_is_not_a_gain():
    vals = fixed_values()
    vals["rd_attnres"] = list(PARENT - D_TREAT)  # +0.029 nats/token: significant, wrong sign
    frames = frames_from_values(vals)
    res = analyze(frames["final"], frames["runs"])
    (tp,) = res.headline()
    assert tp.holm_p < ALPHA and tp.test.mean_diff > 0
    for c in res.verdicts():
        assert f"Holm p = {tp.holm_p:.3g}, but mean dNLL +0.0292 >= 0: the treatment is worse" in c.caveat


def test_equal_nonzero_and_nan_inputs():
    same = paired_test([1.0, 2.0, 3.0], [1.5, 2.5, 3.5])
    assert same.t_p == 0.0 and same.ci_low == same.ci_high == same.mean_diff == -0.5
    with pytest.raises(ValueError, match="non-finite"):
        paired_test([1.0, float("nan"), 2.0], [1.0, 1.0, 1.0])  # sign_test would drop it silently
    with pytest.raises(ValueError, match="same length"):
        paired_test([1.0, 2.0], [1.0])


def test_wilcoxon_with_ties_uses_exact_enumeration():
    d = np.array([1, 1, 2, -3, 4]) * 1e-3
    res = paired_test(d, np.zeros(5))
    assert res.wilcoxon_method == "exact enumeration (ties)"
    assert res.wilcoxon_p == pytest.approx(exact_wilcoxon_enum(d), abs=1e-12)  # 0.375, not scipy's 0.4375
    d0 = np.array([0, 1, 2, -3, 4, 5]) * 1e-3  # one zero dropped: n_nonzero = 5
    res0 = paired_test(d0, np.zeros(6))
    assert res0.n_nonzero == 5 and res0.wilcoxon_min_p == 0.0625
    assert res0.wilcoxon_p == pytest.approx(exact_wilcoxon_enum(d0), abs=1e-12)


def test_min_achievable_p_and_tost_edges():
    assert [min_achievable_p(n) for n in (0, 1, 5, 9)] == [1.0, 1.0, 0.0625, 2.0 ** -8]
    assert math.isnan(tost_p([1, 2, 3], [1, 2, 3.1], 0.0))  # no margin: no equivalence test
    assert math.isnan(tost_p([1, 2], [1, 2], 0.1))  # fewer than 3 pairs


def test_holm_family_leaves_out_untestable_comparisons():
    vals = fixed_values()
    frames = frames_from_values(vals)
    # dup_route has only 2 finished seeds: its two comparisons cannot be tested.
    final = frames["final"].filter(~((pl.col("variant") == "dup_route") & (pl.col("seed") >= 2)))
    runs = frames["runs"].filter(~((pl.col("variant") == "dup_route") & (pl.col("seed") >= 2)))
    table = analyze(final, runs).to_frame()
    fam = table.filter(pl.col("holm_p").is_not_nan())
    assert fam.height == 7 and set(fam["family_size"]) == {7}
    assert fam["holm_p"].to_list() == pytest.approx(
        list(multipletests(fam["t_p"].to_list(), method="holm")[1]), abs=1e-12)


def test_mixed_code_versions_warn_and_duplicates_error():
    frames = frames_from_values(fixed_values())
    runs = frames["runs"].with_columns(
        pl.when(pl.col("run_id") == "rd_attnres-s0").then(pl.lit("def5678+dirty"))
        .otherwise(pl.col("code_version")).alias("code_version"))
    res = analyze(frames["final"], runs)
    mixed = [w for w in res.warnings if "mix code versions" in w]
    assert mixed == ["size=small budget_tokens=1000000: paired runs mix code versions: abc1234 (29 runs), "
                     "def5678+dirty (1 run: rd_attnres-s0)"]
    row = {r["comparison"]: r for r in res.to_frame().iter_rows(named=True)}["rd_attnres - block_attnres"]
    assert row["code_versions"] == "abc1234 def5678+dirty"

    dup = frames["final"].filter(pl.col("run_id") == "rd_attnres-s0").with_columns(pl.lit("again").alias("run_id"))
    with pytest.raises(ValueError, match=r"more than one finished run.*rd_attnres.*seed=0.*again"):
        analyze(pl.concat([frames["final"], dup]), frames["runs"])
    res = analyze(pl.concat([frames["final"], dup]), frames["runs"], allow_partial=True)
    assert {"again", "rd_attnres-s0"} <= {lo.run_id for lo in res.left_out}


def test_bad_frames_raise_clear_errors():
    frames = frames_from_values(fixed_values())
    with pytest.raises(ValueError, match=r"lacks column\(s\) \['val_nll'\]"):
        analyze(frames["final"].drop("val_nll"), frames["runs"])
    no_parent = {k: v for k, v in fixed_values().items() if k != "block_attnres"}
    f2 = frames_from_values(no_parent)
    with pytest.raises(ValueError, match="exactly one parent"):
        analyze(f2["final"], f2["runs"])
    with pytest.raises(ValueError, match="no runs found for grid 'nope'"):
        analyze(frames["final"], frames["runs"], grid="nope")


def test_mixed_model_matches_paired_means_and_reports_boundary_warnings():
    frames = frames_from_values(fixed_values())
    res = analyze(frames["final"], frames["runs"])
    (mm,) = res.mixed
    assert mm.error == "" and mm.n_obs == 30 and mm.n_seeds == 5
    paired = {c.first: c.test.mean_diff for c in res.comparisons if c.second == "block_attnres"}
    # Balanced, complete design: each fixed effect equals the paired mean difference.
    for coef in mm.coefs:
        assert coef.estimate == pytest.approx(paired[coef.variant], abs=1e-9)

    # No seed effect (this draw): the seed variance lands on the boundary, statsmodels
    # warns, and the warning reaches the report instead of being silenced.
    rng = np.random.default_rng(1)
    flat = {v: list(3.5 + eff + rng.normal(0, 0.003, 5)) for v, eff in
            (("block_attnres", 0.0), ("rd_attnres", -0.03), ("dup_route", 0.0))}
    f2 = frames_from_values(flat)
    res2 = analyze(f2["final"], f2["runs"])
    (mm2,) = res2.mixed
    assert mm2.seed_var < 1e-10
    assert any("may be on the boundary" in w for w in mm2.warnings)
    assert any(w.startswith("mixed model size=small") and "boundary" in w for w in res2.warnings)

    # Every seed has exactly the same mean over variants: the fit is singular; reported, no crash.
    e = np.array([0.002, -0.001, 0.003, -0.004, 0.0])
    f3 = frames_from_values({"block_attnres": list(3.5 + e), "rd_attnres": list(3.47 - e), "dup_route": [3.5] * 5})
    (mm3,) = analyze(f3["final"], f3["runs"]).mixed
    assert mm3.error.startswith("fit failed") and mm3.coefs == ()


def test_no_treatment_means_no_verdict():
    vals = {k: v for k, v in fixed_values().items() if k != "rd_attnres"}
    frames = frames_from_values(vals)
    res = analyze(frames["final"], frames["runs"])
    assert res.treatment is None and res.headline() == []
    for c in res.verdicts():
        assert c.verdict == "" and "no treatment" in c.note
        assert math.isnan(c.tost_p)

