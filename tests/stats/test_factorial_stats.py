"""Factorial statistics of DESIGN section 12, paired over seeds: contrasts, tests, planning.

Pinned by independent computations: the interaction's sd under independent run noise (simulated),
the contrasts against a statsmodels OLS with seed fixed effects, the t p against an OLS on an
intercept; a simulated null interaction keeps its level, a planted one is found.
"""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest
import statsmodels.api as sm
import statsmodels.formula.api as smf

from harness.design.analysis_plan import AnalysisPlan
from harness.design.factorial import parse_factorial
from harness.report.simulation.factorial import I_ROW, cell_means, interaction_rates
from harness.report.simulation.rules import binomial_se
from harness.report.simulation.synthetic import frames_from_values
from harness.report.stats import decisions as dec
from harness.report.stats.analysis import analyze
from harness.report.stats.factorial import COMBOS, FACTORIAL_KINDS, INTERACTION, MAIN, SIMPLE, SPECS
from harness.report.stats.looks import at_looks, sequential_p
from harness.report.stats.pairing import ProtocolMismatchError
from harness.report.stats.power import (
    INTERACTION_SD_FACTOR,
    holm_share_plan,
    interaction_seeds,
    mde,
    planned_seeds,
    power_at,
)
from harness.report.stats.seed_planning import GridShape, plan_rows
from harness.report.stats.stats_table import CSV_COLUMNS


def test_the_interaction_sd_is_sqrt2_single_differences_under_independent_run_noise():
    rng = np.random.default_rng(1201)
    y = rng.normal(0.0, 0.03, size=(200_000, 4)) + rng.normal(0.0, 1.0, size=(200_000, 1))  # seed effect
    single = y[:, 1] - y[:, 0]
    inter = y[:, 3] - y[:, 1] - y[:, 2] + y[:, 0]
    main = (y[:, 1] - y[:, 0] + y[:, 3] - y[:, 2]) / 2
    assert abs(inter.std() / single.std() - INTERACTION_SD_FACTOR) < 0.01
    assert abs(inter.var() / main.var() - 4.0) < 0.05  # "about 4x the seeds of a main effect"


def test_interaction_seeds_is_the_first_n_reaching_the_plans_power():
    plan = AnalysisPlan(min_effect_nats=0.02, power=0.8, max_seeds=40)
    need = interaction_seeds(0.02, plan)
    sd = 0.02 * math.sqrt(2)
    assert need.reachable and need.n is not None
    assert (
        power_at(0.02, sd, need.n, 0.05, "two-sided")
        >= 0.8
        > power_at(0.02, sd, need.n - 1, 0.05, "two-sided")
    )
    assert interaction_seeds(0.02, plan, sd_interaction=0.01).n < need.n  # a measured sd wins
    assert interaction_seeds(1.0, plan).n is None  # sd 1.41 for 0.02 nats: not reachable at 40 seeds
    assert interaction_seeds(0.02, AnalysisPlan()).n is None  # no min_effect_nats: nothing to price


LEVELS = {"block_attnres": [0, 0], "param_matched": [1, 0], "rd_attnres": [0, 1], "rd_offset": [1, 1]}
ROLES = {"param_matched": "control", "rd_offset": "reference"}
DESIGN = parse_factorial({"factors": ["offset", "decoupled_v"], "levels": LEVELS})
COMBO = {v: tuple(lv) for v, lv in LEVELS.items()}


def study(y: np.ndarray, **plan) -> tuple:
    """analyze() of one cell whose final NLLs are ``y`` [n seeds, 4] over (y_00, y_10, y_01, y_11)."""
    cols = {c: i for i, c in enumerate(COMBOS)}
    values = {v: [float(x) for x in y[:, cols[c]]] for v, c in COMBO.items()}
    fr = frames_from_values(values, roles=ROLES)
    stats = analyze(fr["final"], fr["runs"], plan=AnalysisPlan(factorial=DESIGN, **plan))
    return stats, fr


def draws(n: int, interaction: float, seed: int, sd: float = 0.01) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return 3.5 + rng.normal(0, 0.05, (n, 1)) + cell_means(interaction) + rng.normal(0, sd, (n, 4))


def test_contrasts_equal_an_ols_with_seed_fixed_effects_and_t_ps_an_ols_on_an_intercept():
    y = draws(7, 0.02, 11)
    stats, fr = study(y, min_effect_nats=0.02)
    cell = stats.factorial[0]
    frame = fr["final"].to_pandas()
    frame["A"] = [COMBO[v][0] for v in frame["variant"]]
    frame["B"] = [COMBO[v][1] for v in frame["variant"]]
    fit = smf.ols("val_nll ~ C(A) * C(B) + C(seed)", data=frame).fit()
    # Treatment coding: A's coefficient is its simple effect at B = 0, B's at A = 0, the product the interaction.
    assert cell.contrast(SIMPLE, 0, 0).mean == pytest.approx(fit.params["C(A)[T.1]"], abs=1e-12)
    assert cell.contrast(SIMPLE, 1, 0).mean == pytest.approx(fit.params["C(B)[T.1]"], abs=1e-12)
    assert cell.contrast(INTERACTION).mean == pytest.approx(fit.params["C(A)[T.1]:C(B)[T.1]"], abs=1e-12)
    for c in cell.contrasts:  # every per-seed contrast's two-sided t p = OLS of the contrast on an intercept
        d = np.array([sum(w * y[i, j] for j, w in enumerate(c.spec.weights)) for i in range(7)])
        ols = sm.OLS(d, np.ones((7, 1))).fit()
        assert c.mean == pytest.approx(float(ols.params[0]), abs=1e-12)
        assert c.p == pytest.approx(float(ols.pvalues[0]), rel=1e-9)
    # Holm over the family of five (four simple effects and the interaction); main effects in no family.
    fam = [c for c in cell.contrasts if c.spec.kind != MAIN]
    assert [c.holm_p for c in fam] == pytest.approx(list(dec.holm([c.p for c in fam])), rel=1e-12)
    assert all(math.isnan(c.holm_p) for c in cell.contrasts if c.spec.kind == MAIN)
    assert {c.family_size for c in fam} == {5}


def test_a_null_interaction_keeps_its_level_and_the_report_path_agrees():
    """No interaction, both main effects present: 4,000 studies per n; the raw test within 2 binomial SEs
    of alpha, the report's verdict (Holm over the family) at most alpha + 2 SEs."""
    for n in (5, 10):
        r = interaction_rates(n, 4000, np.random.default_rng(3800 + n), interaction=0.0)
        assert abs(r.raw - 0.05) <= 2 * binomial_se(0.05, r.studies), (n, r)
        assert r.established <= 0.05 + 2 * binomial_se(0.05, r.studies), (n, r)
    rng = np.random.default_rng(5)  # a few studies through analyze(): the same p as the vectorised path
    y = 3.5 + rng.normal(0, 1.0, (2, 6, 1)) + cell_means(0.0) + rng.normal(0, 0.01, (2, 6, 4))
    p, _ = dec.two_sided_p(np.einsum("snc,c->sn", y, SPECS[I_ROW].weights))
    assert [study(y[s])[0].factorial[0].contrast(INTERACTION).p for s in range(2)] == pytest.approx(
        p, rel=1e-9
    )


def test_a_planted_interaction_is_found_with_the_noncentral_t_power():
    r = interaction_rates(10, 4000, np.random.default_rng(381), interaction=0.03)
    assert abs(r.raw - r.predicted) <= 3 * binomial_se(r.predicted, r.studies), r  # power 0.987
    assert r.established >= 0.9, r  # after Holm over the family of five
    r = interaction_rates(5, 4000, np.random.default_rng(382), interaction=0.02)
    assert abs(r.raw - r.predicted) <= 3 * binomial_se(r.predicted, r.studies), r  # underpowered: power 0.40


def test_verdicts_say_absorbs_helps_and_no_interaction_in_the_grids_names():
    stats, _ = study(draws(8, 0.03, 2), min_effect_nats=0.02)  # decoupled_v's -0.03 cancelled with the offset
    words = stats.factorial[0].verdicts
    assert "offset helps with and without decoupled_v" in words[0]
    assert words[1].startswith("offset absorbs decoupled_v: the interaction (+0.0")
    assert len(words) == 2
    stats, _ = study(draws(8, 0.0, 3), min_effect_nats=0.02)
    words = stats.factorial[0].verdicts
    assert words[:2] == tuple(w for w in words if "helps with and without" in w)
    assert "decoupled_v helps with and without offset" in words[1]
    inter = stats.factorial[0].contrast(INTERACTION)
    assert words[2] == (
        f"no interaction shown at these seeds (n = 8; MDE {inter.mde_nats:.4f} nats/token at power 0.8, "
        "level alpha (every other contrast of the family established); "
        f"an interaction of 0.02 nats/token needs {inter.seeds_needed.n} seeds)"
    )
    assert inter.mde_nats == pytest.approx(mde(inter.sd, 8, 0.05, 0.8, "two-sided"))


def test_a_diverged_run_is_a_loss_for_its_side_and_two_drop_the_seed():
    y = draws(6, 0.0, 4)
    y[2, 3] = float("nan")  # rd_offset (1, 1) diverged at seed 2: a loss in every contrast that weighs it
    y[4, 1] = y[4, 2] = float("nan")  # param_matched and rd_attnres diverged at seed 4
    cell = study(y)[0].factorial[0]
    inter = cell.contrast(INTERACTION)
    observed = [0, 1, 3, 5]
    d = np.array([y[s, 3] - y[s, 1] - y[s, 2] + y[s, 0] for s in observed])
    assert inter.comparison.seeds == tuple(observed) and inter.seeds == (0, 1, 2, 3, 5)
    assert inter.dropped == (4,)
    assert inter.mean == pytest.approx(np.append(d, np.abs(d).max()).mean())  # +M: worst for rd_offset
    b1 = cell.contrast(
        SIMPLE, 1, 1
    )  # rd_offset - param_matched: +M at seed 2; seed 4 is param_matched's loss
    assert dict(zip(b1.seeds, b1.mean * 0 + np.zeros(len(b1.seeds)))).keys() == {0, 1, 2, 3, 4, 5}
    assert [i.seed for i in b1.imputed] == [2, 4] and [i.value > 0 for i in b1.imputed] == [True, False]
    row = study(y)[0].to_frame().filter(pl.col("comparison") == inter.comparison.comparison)
    assert row["imputed_seeds"][0] == "2" and "worst-case imputation" in row["note"][0]


def test_zero_spread_uses_the_exact_sign_flip_p_and_the_floor_blocks_rounding():
    y = np.tile(np.array([3.5, 3.4, 3.45, 3.36]), (5, 1)) + np.arange(5)[:, None] * 0.01
    inter = study(y)[0].factorial[0].contrast(INTERACTION)  # I = 0.01 at every seed: zero spread
    assert inter.exact and inter.p == pytest.approx(2 / 32)
    y = np.tile(np.array([3.5, 3.5, 3.5, 3.5 + 4e-7]), (10, 1))  # I = 4e-7 at every seed: rounding
    inter = study(y)[0].factorial[0].contrast(INTERACTION)
    assert inter.p == pytest.approx(2 / 1024) and inter.holm_p < 0.05 and not inter.established
    assert inter.reason == "mean within the numerical floor"


def test_looks_test_the_first_n_k_seeds_at_the_looks_level():
    y = draws(7, 0.03, 9)
    cell = study(y, looks=(3, 6), max_seeds=6)[0].factorial[0]
    inter = cell.contrast(INTERACTION)
    d = np.array([y[s, 3] - y[s, 1] - y[s, 2] + y[s, 0] for s in range(7)])
    p_looks, _ = at_looks(d, (3, 6), dec.two_sided_p)
    assert inter.look.k == 2 and inter.look.n == 6
    assert inter.p == pytest.approx(float(dec.two_sided_p(d[:6])[0]))
    assert inter.sequential_p == pytest.approx(float(sequential_p(p_looks, (3, 6))[0]))


def test_factorial_rows_in_stats_csv_and_a_mismatched_protocol_is_refused():
    stats, fr = study(draws(4, 0.0, 6))
    frame = stats.to_frame()
    rows = frame.filter(pl.col("kind").is_in(FACTORIAL_KINDS))
    assert rows["kind"].to_list() == [s.kind for s in SPECS]
    assert rows["comparison"][0] == "offset at decoupled_v=0: param_matched - block_attnres"
    assert frame.columns[: len(CSV_COLUMNS)] == list(CSV_COLUMNS)
    runs = fr["runs"].with_columns(
        pl.when(pl.col("run_id") == "rd_offset-s1")
        .then(pl.lit("p1"))
        .otherwise("protocol_hash")
        .alias("protocol_hash")
    )
    final = fr["final"].with_columns(
        pl.when(pl.col("run_id") == "rd_offset-s1")
        .then(pl.lit("p1"))
        .otherwise("protocol_hash")
        .alias("protocol_hash")
    )
    with pytest.raises(ProtocolMismatchError, match="protocol_hash"):
        analyze(final, runs, plan=AnalysisPlan(factorial=DESIGN))


def test_harness_plan_prices_the_interaction_from_a_factorial_pilot_or_sqrt2_single_differences():
    plan = AnalysisPlan(min_effect_nats=0.02, factorial=DESIGN, max_seeds=40)
    variants = tuple(LEVELS)
    shape = GridShape(
        "g", plan, 6, "block_attnres", "rd_attnres", ("param_matched",), (("small", 1_000_000, variants),)
    )
    row = next(r for r in plan_rows(shape, sd=0.01) if r.kind == "interaction")
    assert row.sd_nats == pytest.approx(0.01 * math.sqrt(2))
    at_first_step = holm_share_plan(plan, 5)  # Holm over the cell's 5 factorial contrasts, tested first
    assert row.seeds_needed == interaction_seeds(0.01, at_first_step).n and row.runs == 4 * row.seeds_needed
    pilot, _ = study(draws(6, 0.0, 12), min_effect_nats=0.02)
    row = next(r for r in plan_rows(shape, pilot=pilot) if r.kind == "interaction")
    inter = pilot.factorial[0].contrast(INTERACTION)
    assert row.sd_nats == pytest.approx(inter.sd) and row.sd_df == 5
    assert row.seeds_needed == planned_seeds(0.02, inter.sd, at_first_step, "two-sided").n
    no_factorial = GridShape(
        "g", AnalysisPlan(min_effect_nats=0.02), 6, "block_attnres", "rd_attnres", (), shape.cells
    )
    assert all(r.kind != "interaction" for r in plan_rows(no_factorial, sd=0.01))
