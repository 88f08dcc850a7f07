"""The re-train check's statistics (harness/report/stats/retrain_check.py, DESIGN section 13).

Each statistic against an independent computation: the mean shift's interval and p against scipy's
one-sample t-test, the TOST against statsmodels' ``ttost_paired``, the redraw ratio's interval against the F
quantiles taken through the beta distribution, the correlation's interval against scipy's ``pearsonr``, the MDE
at Holm's first step against statsmodels' power solver, the TOST power against a simulation. The verdicts: a
crafted shift of one variant is ``a bias``, 2 pairs are ``too few pairs to tell`` whatever they show, pairs that
do not exclude a bias of the smallest effect are ``too few pairs to tell``, small shared noise is
``perturbed``, new draws are ``redrawn`` or too few to tell, unchanged values ``bit-identical``.

    python -m pytest -q tests/stats/test_retrain_check.py
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.special
import scipy.stats
from statsmodels.stats.power import TTestPower
from statsmodels.stats.weightstats import ttost_paired

from harness.report.render.retrain_lines import render_csv, render_json, render_text
from harness.report.stats.power import tost_pairs_needed, tost_power
from harness.report.stats.retrain_check import (
    BIAS,
    BIT_IDENTICAL,
    CANNOT_TELL,
    PERTURBATION_RATIO,
    PERTURBED,
    REDRAWN,
    TOO_FEW,
    correlation,
    grid_contrasts,
    mean_interval,
    redraw_ratio,
    retrain_check,
    tost,
)

ROLES = {
    "block_attnres": "parent",
    "rd_attnres": "treatment",
    "param_matched": "control",
    "rd_offset": "reference",
}
FACTORIAL = {
    "factors": ["offset", "decoupled_v"],
    "levels": {"block_attnres": [0, 0], "param_matched": [1, 0], "rd_attnres": [0, 1], "rd_offset": [1, 1]},
}
MACHINE = {"cpu_model": "Test CPU", "cpu_cores": 2, "torch": "2.x", "workers": 2, "threads_per_worker": 1}


def _archive(seeds: int = 12, seed: int = 0) -> dict[tuple[str, int], float]:
    """Designed NLLs: a per-seed level, a variant effect, run noise of sd 0.02 nats/token."""
    rng = np.random.default_rng(seed)
    effect = {"block_attnres": 0.0, "rd_attnres": -0.03, "param_matched": -0.11, "rd_offset": -0.13}
    level = rng.normal(3.9, 0.03, seeds)
    return {
        (v, s): float(level[s] + e + rng.normal(0, 0.02)) for v, e in effect.items() for s in range(seeds)
    }


def _nudged(arch, seeds: int, sd: float, rng, shift: dict | None = None) -> dict:
    """The first ``seeds`` seeds re-trained as a perturbation: each run + N(0, sd) (+ ``shift`` per variant)."""
    return {k: v + (shift or {}).get(k[0], 0.0) + rng.normal(0, sd) for k, v in arch.items() if k[1] < seeds}


def test_mean_interval_is_scipys_one_sample_t_test():
    x = np.array([0.012, -0.004, 0.021, 0.003, -0.009, 0.017])
    mean, sd, low, high, p = mean_interval(x)
    ref = scipy.stats.ttest_1samp(x, 0.0)
    ci = ref.confidence_interval(0.95)
    assert mean == pytest.approx(x.mean(), abs=1e-15) and sd == pytest.approx(np.std(x, ddof=1), rel=1e-12)
    assert (low, high) == pytest.approx((ci.low, ci.high), rel=1e-12)
    assert p == pytest.approx(ref.pvalue, rel=1e-12)
    assert mean_interval([0.0, 0.0, 0.0]) == (0.0, 0.0, 0.0, 0.0, 1.0)  # no spread, no shift: p 1
    assert mean_interval([0.01, 0.01, 0.01])[4] == 0.0  # a constant shift is a shift
    batch = np.stack([x, x[::-1] * 2, np.full(6, 0.01)])  # vectorised over sets: each row as on its own
    for i, row in enumerate(batch):
        assert [float(v[i]) for v in mean_interval(batch)] == pytest.approx(
            list(mean_interval(row)), rel=1e-12
        )


def test_tost_is_statsmodels_ttost_paired_and_its_bound_is_where_it_starts_to_reject():
    rng = np.random.default_rng(2)
    archived = rng.normal(-0.05, 0.04, 8)
    new = archived + rng.normal(0.002, 0.01, 8)
    margin = 0.0173
    p, bound = tost(new - archived, margin, 0.05)
    ref_p, lower, upper = ttost_paired(new, archived, -margin, margin)
    assert p == pytest.approx(ref_p, rel=1e-10) and p == pytest.approx(max(lower[1], upper[1]), rel=1e-10)
    # the bound: the largest |end| of the 90 % t interval; the TOST at that margin has p = alpha exactly
    ci = scipy.stats.ttest_1samp(new - archived, 0.0).confidence_interval(0.90)
    assert bound == pytest.approx(max(abs(ci.low), abs(ci.high)), rel=1e-12)
    assert ttost_paired(new, archived, -bound, bound)[0] == pytest.approx(0.05, rel=1e-9)
    assert tost(new - archived, bound * 1.001, 0.05)[0] < 0.05 < tost(new - archived, bound * 0.999, 0.05)[0]
    assert tost([0.001, 0.001, 0.001], 0.01, 0.05) == (0.0, 0.001)  # zero spread: inside the margin
    assert tost([0.02, 0.02], 0.01, 0.05) == (1.0, 0.02)
    assert math.isnan(tost([0.01, 0.02], float("nan"), 0.05)[0])  # no margin, no p; the bound stands


def test_the_redraw_ratio_interval_is_the_f_pivot():
    """The interval inverts the F law of a ratio of two independent sample variances; the F quantiles are taken
    here through the beta distribution (F = d2 B / (d1 (1 - B)), B ~ Beta(d1/2, d2/2)), not scipy.stats.f."""
    rng = np.random.default_rng(4)
    shifts, seed_sd, archive_seeds = rng.normal(0, 0.01, 8), 0.04, 24
    ratio, low, high = redraw_ratio(shifts, seed_sd, archive_seeds)
    assert ratio == pytest.approx(np.var(shifts, ddof=1) / (2 * seed_sd**2), rel=1e-12)
    d1, d2 = 7, 23

    def f_quantile(q):
        b = scipy.special.betaincinv(d1 / 2, d2 / 2, q)
        return d2 * b / (d1 * (1 - b))

    assert (low, high) == pytest.approx((ratio / f_quantile(0.975), ratio / f_quantile(0.025)), rel=1e-9)
    assert all(math.isnan(v) for v in redraw_ratio(shifts[:1], seed_sd, archive_seeds))
    assert all(math.isnan(v) for v in redraw_ratio(shifts, 0.0, archive_seeds))


def test_the_correlation_interval_is_scipys_fisher_z():
    rng = np.random.default_rng(6)
    a = rng.normal(0, 0.04, 8)
    b = a + rng.normal(0, 0.01, 8)
    r, low, high = correlation(a, b)
    ref = scipy.stats.pearsonr(a, b)
    ci = ref.confidence_interval(0.95)
    assert (r, low, high) == pytest.approx((ref.statistic, ci.low, ci.high), rel=1e-10)
    assert all(math.isnan(v) for v in correlation(a[:3], b[:3]))  # Fisher's z needs 4 pairs


def test_tost_power_is_exact_and_pairs_needed_is_the_first_n_that_reaches_it():
    rng = np.random.default_rng(8)
    for n, sd, margin in ((8, 0.012, 0.0173), (3, 0.01, 0.02), (20, 0.02, 0.01)):
        x = rng.normal(0, sd, (40_000, n))
        t = scipy.stats.t.ppf(0.95, n - 1)
        sim = ((np.abs(x.mean(1)) + t * x.std(1, ddof=1) / np.sqrt(n)) < margin).mean()
        se = math.sqrt(sim * (1 - sim) / 40_000)
        assert tost_power(margin, sd, n, 0.05) == pytest.approx(sim, abs=4 * se + 1e-4)
    n = tost_pairs_needed(0.0173, 0.012, 0.05, 0.8)
    assert tost_power(0.0173, 0.012, n - 1, 0.05) < 0.8 <= tost_power(0.0173, 0.012, n, 0.05)
    assert tost_pairs_needed(0.0173, 1e-7, 0.05, 0.8) == 3  # never below the 3 pairs a verdict needs
    assert tost_pairs_needed(0.0173, 0.5, 0.05, 0.8) is None  # not within 1000 pairs


def test_the_grid_contrasts_are_its_comparisons_then_the_new_factorial_ones():
    labels = [c.label for c in grid_contrasts(ROLES, FACTORIAL)]
    assert labels == [
        "rd_attnres - block_attnres",
        "param_matched - block_attnres",
        "rd_attnres - param_matched",
        "block_attnres - rd_offset",
        "offset at decoupled_v=1: rd_offset - rd_attnres",
        "decoupled_v at offset=1: rd_offset - param_matched",
        "interaction offset x decoupled_v: (rd_offset - param_matched) - (rd_attnres - block_attnres)",
    ]  # the simple effects at level 0 are the treatment's and the control's comparisons already
    assert [c.label for c in grid_contrasts({"a": "parent", "b": "treatment"})] == ["b - a"]
    with pytest.raises(ValueError, match="one parent"):
        grid_contrasts({"a": "treatment"})


def test_unchanged_values_are_bit_identical():
    arch = _archive()
    new = {k: v for k, v in arch.items() if k[1] < 4}
    check = retrain_check(arch, new, grid_contrasts(ROLES, FACTORIAL), min_effect_nats=0.02)
    assert check.verdict == BIT_IDENTICAL
    assert all(c.mean == 0 and c.ci_low == 0 and c.ci_high == 0 for c in check.contrasts)
    assert len(check.runs) == 16 and len(check.pairs) == 7 * 4


def test_a_crafted_shift_of_one_variant_is_a_bias_and_its_numbers_are_the_hand_computed_ones():
    arch = _archive()
    rng = np.random.default_rng(5)
    new = _nudged(arch, 6, 0.002, rng, {"rd_attnres": 0.05})  # this machine makes the treatment worse
    contrasts = grid_contrasts(ROLES, FACTORIAL)
    check = retrain_check(arch, new, contrasts, min_effect_nats=0.02)
    assert check.verdict == BIAS
    row = check.contrasts[0]  # rd_attnres - block_attnres
    d_shift = [
        (new["rd_attnres", s] - new["block_attnres", s]) - (arch["rd_attnres", s] - arch["block_attnres", s])
        for s in range(6)
    ]
    ref = scipy.stats.ttest_1samp(d_shift, 0.0)
    assert row.mean == pytest.approx(np.mean(d_shift), abs=1e-12) and row.p == pytest.approx(
        ref.pvalue, rel=1e-9
    )
    assert (row.ci_low, row.ci_high) == pytest.approx(tuple(ref.confidence_interval(0.95)), rel=1e-9)
    arch_d = [arch["rd_attnres", s] - arch["block_attnres", s] for s in range(12)]
    assert row.seed_sd == pytest.approx(np.std(arch_d, ddof=1), rel=1e-12) and row.archive_seeds == 12
    assert row.mean_in_sd == pytest.approx(row.mean / row.seed_sd, rel=1e-12)
    # the MDE is priced at Holm's first step over the 7 contrasts, not at alpha
    assert row.mde_level == pytest.approx(0.05 / 7)
    es = TTestPower().solve_power(nobs=6, alpha=0.05 / 7, power=0.8, alternative="two-sided")
    assert row.mde_nats == pytest.approx(es * np.std(d_shift, ddof=1), rel=1e-5)
    power = TTestPower().power(
        effect_size=check.smallest_effect / np.std(d_shift, ddof=1), nobs=6, alpha=0.05 / 7
    )
    assert row.power_at_effect == pytest.approx(power, rel=1e-9)
    # the contrasts without rd_attnres did not move beyond noise
    untouched = {c.contrast: c for c in check.contrasts}["param_matched - block_attnres"]
    assert abs(untouched.mean) < 0.01
    text = render_text(check, MACHINE, "x.tar.gz")
    assert "**Verdict: a bias" in text and "Test CPU" in text
    csv_text, json_text = render_csv(check, MACHINE), render_json(check, MACHINE, "x.tar.gz")
    assert csv_text.count("\n") == 1 + 24 + 7 * 6 + 7 and '"verdict": "a bias"' in json_text
    assert "/" not in json_text.replace("nats/token", "")  # no path in what is shared


def test_two_pairs_are_too_few_to_tell_even_when_they_barely_moved():
    """Shifts of a millionth of a seed sd at 2 pairs (a grid re-trained with other threads): no MDE can be priced
    and no verdict rests on 2 pairs, so neither 'a fresh draw' nor 'like new draws'; the words say how little
    the runs moved and how many pairs would tell."""
    arch = _archive()
    rng = np.random.default_rng(3)
    check = retrain_check(
        arch, _nudged(arch, 2, 1e-8, rng), grid_contrasts(ROLES, FACTORIAL), min_effect_nats=0.02
    )
    assert check.verdict == TOO_FEW and all(c.n == 2 and math.isnan(c.mde_nats) for c in check.contrasts)
    assert all(c.var_ratio_high < 1e-3 for c in check.contrasts)  # far below a redraw, even at 1 df
    text = render_text(check, MACHINE, "x.tar.gz")
    verdict = text[text.index("**Verdict") : text.index("## Runs")]
    assert verdict.startswith("**Verdict: too few pairs to tell: 2 pairs per contrast")
    assert "The runs were perturbed, not redrawn" in verdict and "About 3 pairs would exclude" in verdict
    assert "fresh draw" not in text and "new draws" not in verdict.replace("less than new draws", "")


def test_no_bias_shown_but_the_smallest_effect_not_excluded_is_too_few_pairs_to_tell():
    arch = _archive()
    rng = np.random.default_rng(11)
    new = _nudged(arch, 4, 0.015, rng)  # large noise, 4 pairs: nothing shown, nothing excluded
    check = retrain_check(arch, new, grid_contrasts(ROLES, FACTORIAL), min_effect_nats=0.02)
    assert check.verdict == TOO_FEW and all(c.holm_p >= 0.05 for c in check.contrasts)
    assert any(c.tost_p >= 0.05 for c in check.contrasts)
    text = render_text(check, MACHINE, "x.tar.gz")
    assert "do not exclude a bias of the smallest effect" in text and "About " in text


def test_a_small_shared_nudge_is_perturbed_with_the_bias_it_excludes():
    arch = _archive(seeds=24)
    rng = np.random.default_rng(12)
    new = _nudged(arch, 12, 0.002, rng)  # a perturbation: 0.1 run sd
    check = retrain_check(arch, new, grid_contrasts(ROLES, FACTORIAL), min_effect_nats=0.02)
    assert check.verdict == PERTURBED
    assert all(c.var_ratio_high < 1 and c.corr > 0.9 and c.tost_p < 0.05 for c in check.contrasts)
    bound = max(c.bound for c in check.contrasts)
    text = render_text(check, MACHINE, "x.tar.gz")
    assert "**Verdict: perturbed: the runs were perturbed, not redrawn" in text
    assert f"they exclude a bias of {bound:.4f} nats/token or more" in text


def test_new_draws_are_redrawn_only_when_every_interval_excludes_a_perturbation():
    """Re-drawn runs (fresh noise at every run) with a smallest effect large against their spread: no bias, the
    effect excluded. At 24 pairs every contrast's redraw-ratio interval lies above PERTURBATION_RATIO: redrawn.
    Nudged runs whose intervals reach both 1 and PERTURBATION_RATIO: the words say they cannot tell (the old
    rule said "redrawn" whenever an interval reached 1, a fallthrough, not a finding)."""
    arch = _archive(seeds=24)
    rng = np.random.default_rng(13)
    level = {s: float(np.mean([arch[v, s] for v in ROLES])) for s in range(24)}
    effect = {"block_attnres": 0.0, "rd_attnres": -0.03, "param_matched": -0.11, "rd_offset": -0.13}
    new = {(v, s): level[s] + effect[v] + rng.normal(0, 0.02) for v in ROLES for s in range(24)}
    contrasts = grid_contrasts(ROLES, FACTORIAL)[:3]  # parent, treatment, control: all resolved
    check = retrain_check(arch, new, contrasts, min_effect_nats=0.2)
    assert check.verdict == REDRAWN, check.reason
    assert all(c.var_ratio_low > PERTURBATION_RATIO for c in check.contrasts)
    assert "**Verdict: redrawn: the runs were redrawn, not perturbed" in render_text(
        check, MACHINE, "x.tar.gz"
    )
    # a nudge of 0.01 nats/token at 8 pairs: intervals from 0.07 to 1.61, reaching 1 and 0.25 both
    between = retrain_check(
        arch, _nudged(arch, 8, 0.01, np.random.default_rng(14)), contrasts, min_effect_nats=0.2
    )
    assert between.verdict == CANNOT_TELL, between.reason
    assert any(c.var_ratio_high >= 1 for c in between.contrasts)
    assert any(c.var_ratio_low <= PERTURBATION_RATIO for c in between.contrasts)
    text = render_text(between, MACHINE, "x.tar.gz")
    assert "**Verdict: cannot tell perturbed from redrawn at 8 pairs: the runs may have moved" in text


def test_the_smallest_effect_is_the_smallest_resolved_one_else_the_plan():
    arch = _archive(seeds=24)
    contrasts = grid_contrasts(ROLES, FACTORIAL)
    new = {k: v for k, v in arch.items() if k[1] < 3}
    check = retrain_check(arch, new, contrasts, min_effect_nats=0.5)
    resolved = []
    for c in contrasts:
        d = [c.value({v: arch[v, s] for v, _ in c.weights}) for s in range(24)]
        ci = scipy.stats.ttest_1samp(d, 0.0).confidence_interval(0.95)
        if ci.low > 0 or ci.high < 0:
            resolved.append((abs(np.mean(d)), c.label))
    assert resolved and (check.smallest_effect, check.smallest_effect_source) == pytest.approx(min(resolved))
    flat = {(v, s): 3.9 + 0.01 * ((s * 7 + len(v)) % 5) for v in ROLES for s in range(6)}  # nothing resolved
    check = retrain_check(flat, {k: y for k, y in flat.items() if k[1] < 3}, contrasts, min_effect_nats=0.02)
    assert (check.smallest_effect, check.smallest_effect_source) == (0.02, "the plan's min_effect_nats")


def test_a_retrained_run_the_archive_lacks_is_refused():
    arch = _archive(seeds=3)
    with pytest.raises(ValueError, match="no archived NLL"):
        retrain_check(arch, {("rd_attnres", 7): 3.9}, grid_contrasts(ROLES, FACTORIAL))


def test_a_contrast_whose_interval_alone_excludes_0_is_named():
    """Holm across the contrasts decides a bias; a contrast whose own 95 % interval excludes 0 is named beside
    the verdict (a candidate bias), so a reader sees what Holm absorbed."""
    arch = _archive(seeds=24)
    rng = np.random.default_rng(2)
    new = _nudged(arch, 8, 0.003, rng, {"rd_offset": 0.004})
    check = retrain_check(arch, new, grid_contrasts(ROLES, FACTORIAL), min_effect_nats=0.05)
    alone = [c for c in check.contrasts if c.ci_low > 0 or c.ci_high < 0]
    assert check.verdict == PERTURBED and [c.contrast for c in alone] == [
        "offset at decoupled_v=1: rd_offset - rd_attnres"
    ]
    assert alone[0].p < 0.05 <= alone[0].holm_p
    text = render_text(check, MACHINE, "x.tar.gz")
    assert f"Alone (without Holm), the 95 % interval of {alone[0].contrast}" in text
    calm = retrain_check(
        arch, _nudged(arch, 8, 0.001, np.random.default_rng(2)), grid_contrasts(ROLES, FACTORIAL)
    )
    assert "Alone" not in render_text(calm, MACHINE, "x.tar.gz")
