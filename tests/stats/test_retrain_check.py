"""The cross-machine A/A check's statistics (harness/report/stats/retrain_check.py, DESIGN section 13).

The mean shift's interval and p equal scipy's one-sample t-test, its MDE statsmodels' power solver; the
grid's contrasts follow its roles and factorial table; a crafted shift of one variant is ``a bias``, noise
shared by the variants ``a fresh draw`` and unchanged values ``bit-identical``.

    python -m pytest -q tests/stats/test_retrain_check.py
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.stats
from statsmodels.stats.power import TTestPower

from harness.report.render.retrain_lines import render_csv, render_json, render_text
from harness.report.stats.retrain_check import (
    BIAS,
    BIT_IDENTICAL,
    FRESH_DRAW,
    grid_contrasts,
    mean_interval,
    retrain_check,
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
    shift = {"rd_attnres": 0.05}  # this machine makes the treatment worse, by more than its gain
    new = {k: v + shift.get(k[0], 0.0) + rng.normal(0, 0.002) for k, v in arch.items() if k[1] < 6}
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
    es = TTestPower().solve_power(nobs=6, alpha=0.05, power=0.8, alternative="two-sided")
    assert row.mde_nats == pytest.approx(es * np.std(d_shift, ddof=1), rel=1e-5)
    # the contrasts without rd_attnres did not move beyond noise
    untouched = {c.contrast: c for c in check.contrasts}["param_matched - block_attnres"]
    assert abs(untouched.mean) < 0.01
    text = render_text(check, MACHINE, "x.tar.gz")
    assert "**Verdict: a bias" in text and "Test CPU" in text
    csv_text, json_text = render_csv(check, MACHINE), render_json(check, MACHINE, "x.tar.gz")
    assert csv_text.count("\n") == 1 + 24 + 7 * 6 + 7 and '"verdict": "a bias"' in json_text
    assert "/" not in json_text.replace("nats/token", "")  # no path in what is shared


def test_noise_shared_by_both_sides_is_a_fresh_draw_with_its_mde():
    arch = _archive()
    rng = np.random.default_rng(11)
    new = {k: v + rng.normal(0, 0.015) for k, v in arch.items() if k[1] < 8}  # each run re-drawn, no bias
    check = retrain_check(arch, new, grid_contrasts(ROLES, FACTORIAL), min_effect_nats=0.02)
    assert check.verdict == FRESH_DRAW
    assert all(c.holm_p >= 0.05 for c in check.contrasts)
    assert all(c.mde_nats > 0 and c.n == 8 for c in check.contrasts)
    assert "a fresh draw" in render_text(check, MACHINE, "x.tar.gz")


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


def test_a_fresh_draw_names_a_contrast_whose_interval_alone_excludes_0():
    """Holm across the contrasts decides the verdict; a contrast whose own 95 % interval excludes 0 is named
    beside it (a candidate bias), so a reader sees what Holm absorbed."""
    arch = _archive()
    rng = np.random.default_rng(1)
    new = {
        k: v + (0.006 if k[0] == "rd_offset" else 0.0) + rng.normal(0, 0.004)
        for k, v in arch.items()
        if k[1] < 4
    }
    check = retrain_check(arch, new, grid_contrasts(ROLES, FACTORIAL), min_effect_nats=0.02)
    alone = [c for c in check.contrasts if c.ci_low > 0 or c.ci_high < 0]
    assert check.verdict == FRESH_DRAW and [c.contrast for c in alone] == [
        "decoupled_v at offset=1: rd_offset - param_matched"
    ]
    assert alone[0].p < 0.05 <= alone[0].holm_p
    text = render_text(check, MACHINE, "x.tar.gz")
    assert (
        "Alone (without Holm), the 95 % interval of decoupled_v at offset=1: rd_offset - param_matched"
        in text
    )
    calm = retrain_check(arch, {k: v for k, v in arch.items() if k[1] < 4}, grid_contrasts(ROLES, FACTORIAL))
    assert "Alone" not in render_text(calm, MACHINE, "x.tar.gz")
