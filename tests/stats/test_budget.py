"""Gain vs budget (harness/report/stats/budget.py, DESIGN section 8): points per budget, the slope of d on
log2(budget) from d ~ log2(budget) + (1 | seed), the report's table and figure. CPU only, ~5 s:

    python -m pytest -q tests/stats/test_budget.py
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from harness.report.build import Frames, build_report
from harness.report.simulation.synthetic import synthetic_frames
from harness.report.stats.analysis import analyze
from harness.report.stats.budget import gain_vs_budget

BUDGETS = (100_000, 400_000, 1_600_000)


def _frames(seeds=(0, 1, 2, 3), budgets=BUDGETS, **kw):
    return synthetic_frames(seeds=seeds, budgets=budgets, n_layers=2, n_evals=2, **kw)


def test_points_are_the_reports_descriptives_and_the_slope_is_ols_when_balanced():
    f = _frames()
    st = analyze(f["final"], f["runs"])
    gvb = st.budget
    comps = {(c.comparison, c.budget_tokens): c for c in st.comparisons}
    for p in gvb.points:
        c = comps[(p.comparison, p.budget_tokens)]
        assert (p.n, p.mean, p.ci_low, p.ci_high) == (
            c.stats.n,
            c.stats.mean,
            c.stats.ci_low,
            c.stats.ci_high,
        )
    assert {p.comparison for p in gvb.points} == {
        "rd_attnres - block_attnres",
        "param_matched - block_attnres",
        "dup_route - block_attnres",
        "fixed_v - block_attnres",
        "dup_route_tied - block_attnres",
    }
    for s in gvb.slopes:
        pairs = [p for p in st.pairs if p.comparison == s.comparison]
        if s.comparison.startswith("dup_route_tied"):  # bit-identical A/A: nothing to fit
            assert s.slope == 0.0 and "not fitted: every paired difference is 0" in s.error
            continue
        # Every seed at every budget: the random intercept is orthogonal to the budget contrast, so the
        # REML slope is the least-squares slope of d on log2(budget).
        ols = np.polyfit(np.log2([p.budget_tokens for p in pairs]), [p.diff for p in pairs], 1)[0]
        assert s.slope == pytest.approx(ols, abs=1e-9), s
        assert (
            s.coef.ci_low < s.slope < s.coef.ci_high
            and s.n_obs == 12
            and s.n_seeds == 4
            and s.budgets == BUDGETS
        )


def test_a_gain_that_grows_with_the_budget_has_a_negative_slope():
    f = _frames(seeds=tuple(range(6)), effects={"block_attnres": 0.0, "rd_attnres": -0.01})
    # Plant d = -0.01 - 0.004 log2(budget / 100k): the gain grows by 0.004 nats/token per doubling.
    final = f["final"].with_columns(
        pl.when(pl.col("variant") == "rd_attnres")
        .then(pl.col("val_nll") - 0.004 * (pl.col("budget_tokens") / 100_000).log(2))
        .otherwise(pl.col("val_nll"))
        .alias("val_nll")
    )
    st = analyze(final, f["runs"])
    (s,) = gain_vs_budget(st.comparisons, st.pairs).slopes
    assert s.slope == pytest.approx(-0.004, abs=0.002) and s.coef.ci_high < 0


def test_unbalanced_budgets_still_fit_and_one_budget_gives_nothing():
    f = _frames()
    drop = (
        (pl.col("variant") == "rd_attnres") & (pl.col("seed") == 3) & (pl.col("budget_tokens") == 1_600_000)
    )
    st = analyze(f["final"].filter(~drop), f["runs"].filter(~drop))
    s = next(x for x in st.budget.slopes if x.comparison == "rd_attnres - block_attnres")
    assert s.n_obs == 11 and np.isfinite(s.slope) and not s.error
    one = _frames(budgets=(100_000,))
    assert analyze(one["final"], one["runs"]).budget.points == ()


@pytest.mark.slow  # 7 s on 2 cores: out of the developer's loop (`pytest -m "not slow"`)
def test_report_has_the_table_and_the_figure(tmp_path):
    f = _frames()
    frames = Frames(f["final"], f["runs"], f["metrics"], f["routing"], f["route_pairs"], f["route_params"])
    res = build_report(frames, tmp_path, grid="synthetic")
    assert "gain_vs_budget_small" in [fig.name for fig in res.figures]
    assert (tmp_path / "figures" / "gain_vs_budget_small.png").stat().st_size > 10_000
    md = (tmp_path / "report.md").read_text()
    assert "## Gain vs budget" in md and "slope of d per doubling [95 % CI]" in md
    assert "| rd_attnres - block_attnres | small | 100_000, 400_000, 1_600_000 | 12 (4) |" in md
    one = _frames(budgets=(100_000,))
    res = build_report(Frames(one["final"], one["runs"]), tmp_path / "one", grid="synthetic")
    assert "## Gain vs budget" not in (tmp_path / "one" / "report.md").read_text()
    assert not any(fig.name.startswith("gain_vs_budget") for fig in res.figures)
