"""Simulation tests of DESIGN sections 6 and 8 through the report's own decision functions.

Seeded; tolerances from the binomial standard error of each rate (4 SEs unless a test says otherwise). The studies run
through harness.report.stats.decisions exactly as harness.report.stats.analysis calls it (harness/report/simulation/studies.py), and
one small batch is also pushed through the full analyze() path to show the two agree.
The expected rates come from an independent power computation (statsmodels TTestPower,
noncentral t). Sequential looks (DESIGN 8) run through harness.report.stats.looks the same way. The edge cases
statistics v3 added (divergence, absence, grid families, A/A, conditional rates, rounding; issue 27)
follow, the same way. CPU only, ~30 s:

    python -m pytest -q tests/stats/test_simulate.py
"""

from __future__ import annotations

import json
import math

import numpy as np
import polars as pl
import pytest
from statsmodels.stats.power import TTestPower

from harness.design.analysis_plan import AnalysisPlan
from harness.report.simulation.edges import (
    LOSS_RULES,
    aa_grid,
    absence_rate,
    conditional_control_error,
    divergence_null,
    grid_boundary_controls,
    lost_when_losing,
    rounding_verdicts,
)
from harness.report.simulation.rules import (
    FRACTIONS,
    GAIN,
    NOISE_SD,
    binomial_se,
    established_by_look,
    headline_false_positive_rate,
    sequential_null,
    sequential_verdicts,
    verdict_rates,
)
from harness.report.simulation.studies import main
from harness.report.simulation.synthetic import frames_from_values
from harness.report.stats import decisions as dec
from harness.report.stats.analysis import analyze
from harness.report.stats.decisions import CONDITIONAL_RATES
from harness.report.stats.divergence import impute
from harness.report.stats.looks import increments

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
    assert main(["--tables", "rules", "--studies", "500", "--seed", "1"]) == 0
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


@pytest.mark.slow
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
    assert main(["--tables", "rules", "--studies", "300", "--seed", "2"]) == 0
    out = capsys.readouterr().out
    assert "Sequential looks [3, 5, 10]" in out and "naive" in out and "Sequential verdicts" in out


def test_simulate_command_writes_every_row_as_json(tmp_path, capsys):
    """--json FILE: every rate of the chosen row tables as an object (table, setting, truth, says, rate,
    studies); the retrain rows of one setting and truth are its verdicts' shares, summing to 1. A table that
    keeps no rows, a bad table name or a missing folder is refused in one line, no file written."""
    out = tmp_path / "rows.json"
    assert main(["--tables", "retrain", "--studies", "100", "--seed", "4", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())
    assert rows and all(set(r) == {"table", "setting", "truth", "says", "rate", "studies"} for r in rows)
    assert {r["table"] for r in rows} == {"retrain"} and {r["studies"] for r in rows} == {100}
    groups: dict[tuple[str, str], float] = {}
    for r in rows:
        groups[(r["setting"], r["truth"])] = groups.get((r["setting"], r["truth"]), 0.0) + r["rate"]
    assert all(abs(total - 1) < 1e-12 for total in groups.values())
    assert {"redrawn", "perturbed (redraw ratio 0.0612)", "perturbed (redraw ratio 0.25)"} <= {
        r["truth"] for r in rows
    }
    assert "K = 3 pairs, smallest effect 0.2 nats/token" in {r["setting"] for r in rows}
    capsys.readouterr()
    for argv, words in (
        (["--tables", "rules", "--json", str(tmp_path / "x.json")], "--json: table(s) rules keep no rows"),
        (["--tables", "retrain,bogus"], "allowed are all or a comma-separated list of rules, edges"),
        (["--tables", "retrain", "--json", str(tmp_path / "no" / "x.json")], "no folder"),
    ):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        err = capsys.readouterr().err
        assert exc.value.code == 2 and words in err and "Traceback" not in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rows.json"]


def test_simulate_command_prints_every_table_by_default(capsys):
    assert main(["--studies", "100"]) == 0
    out = capsys.readouterr().out
    assert "Headline false-positive rate under a true null" in out and "Float rounding only" in out


# --------------------------------------------------------------------------- edge cases (statistics v3, issue 27)


def tol(rate: float, studies: int = STUDIES) -> float:
    return 4 * max(binomial_se(rate, studies), 1 / studies)


@pytest.mark.parametrize("n", [3, 5, 8, 10])
def test_divergence_when_it_would_lose_keeps_the_false_positive_rate(n):
    rng = np.random.default_rng(2700 + n)
    for rule in LOSS_RULES:
        as_loss, dropped = divergence_null(n, STUDIES, rng, rule=rule, alpha=ALPHA)
        assert as_loss <= ALPHA + tol(ALPHA), (n, rule, as_loss)
        if n >= 5:  # dropping the lost pairs inflates it: the test above can fail
            assert dropped > ALPHA + tol(ALPHA), (n, rule, dropped)


def test_the_report_path_counts_divergence_as_the_simulation_does():
    """Studies through analyze(), the treatment's lost seeds written as diverged runs: the same
    tested differences and established flags as the vectorised path."""
    rng = np.random.default_rng(2711)
    n, studies = 6, 12
    parent = rng.normal(0.0, NOISE_SD, (studies, n))
    d = -0.002 + rng.normal(0.0, NOISE_SD, (studies, n))
    lost = lost_when_losing(d, "half the losing seeds", rng)
    tested = impute(d, lost)
    p, _ = dec.headline_p(tested[:, None])
    est = dec.decide_headline(np.full(p.shape, n), tested.mean(axis=-1)[:, None], p, ALPHA)[1][:, 0]
    assert lost.any()
    for s in range(studies):
        frames = frames_from_values(
            {"block_attnres": list(3.5 + parent[s]), "rd_attnres": list(3.5 + parent[s] + d[s])}
        )
        ids = [f"rd_attnres-s{i}" for i in np.flatnonzero(lost[s])]
        gone = pl.col("run_id").is_in(ids)
        runs = frames["runs"].with_columns(
            pl.when(gone).then(pl.lit("diverged")).otherwise(pl.col("status")).alias("status"),
            pl.when(gone).then(pl.lit("loss became NaN")).otherwise(pl.col("error")).alias("error"),
        )
        final = frames["final"].filter(~frames["final"]["run_id"].is_in(ids))
        (h,) = analyze(final, runs).headlines
        # d from stored NLLs (3.5 + parent + d) - (3.5 + parent) differs from d in the last bits only.
        assert np.allclose(h_d := np.array([x for x in _tested(h, final)]), tested[s], atol=1e-12), (s, h_d)
        assert h.established == bool(est[s]) and [i.seed for i in h.imputed] == list(np.flatnonzero(lost[s]))


def _tested(h, final):
    """The headline's tested differences, rebuilt from the stored NLLs and its imputed seeds."""
    nll = {(r["variant"], r["seed"]): r["val_nll"] for r in final.iter_rows(named=True)}
    imputed = {i.seed: i.value for i in h.imputed}
    return [
        imputed[s] if s in imputed else nll[("rd_attnres", s)] - nll[("block_attnres", s)] for s in h.seeds
    ]


@pytest.mark.parametrize("n,cells", [(3, 1), (5, 1), (10, 1), (5, 3)])
def test_gain_absent_keeps_its_level_at_the_boundary(n, cells):
    """H0 of the absence test is "gain >= delta": at gain = delta (the boundary) 'gain absent' is
    claimed in <= alpha of the studies (Holm over the cells); at gain 0 it has power."""
    rng = np.random.default_rng(2720 + n + cells)
    delta = 0.006
    at_boundary = absence_rate(n, STUDIES, rng, gain=delta, delta=delta, cells=cells, alpha=ALPHA)
    assert at_boundary <= ALPHA + tol(ALPHA), at_boundary
    beyond = absence_rate(n, STUDIES, rng, gain=2 * delta, delta=delta, cells=cells, alpha=ALPHA)
    assert beyond <= ALPHA / 10 + tol(ALPHA / 10)
    if n >= 5:
        assert absence_rate(n, STUDIES, rng, gain=0.0, delta=delta, cells=cells, alpha=ALPHA) > 0.5


def test_absence_alone_has_its_level_at_the_boundary():
    """The absence test itself (without the precedence of 'established'), one cell: rate ~= alpha."""
    rng = np.random.default_rng(2729)
    n, delta = 5, 0.006
    d = -delta + rng.normal(0.0, NOISE_SD, (STUDIES, 1, n)) - rng.normal(0.0, NOISE_SD, (STUDIES, 1, n))
    p, _ = dec.absence_p(d, delta)
    _, absent = dec.decide_absence(np.full(p.shape, n), d.mean(axis=-1), p, delta, ALPHA)
    assert abs(absent.mean() - ALPHA) <= tol(ALPHA), absent.mean()


@pytest.mark.parametrize("n", [5, 8])
def test_holm_over_the_grid_keeps_boundary_controls_below_alpha(n):
    """Issue 27 item 4: a boundary control in each of 3 cells gave >= 1 wrong definite verdict in
    .13-.15 of grids with Holm per cell; with Holm over the grid it is <= alpha."""
    rng = np.random.default_rng(2730 + n)
    grid = grid_boundary_controls(n, STUDIES, rng, alpha=ALPHA)
    per_cell = grid_boundary_controls(n, STUDIES, rng, alpha=ALPHA, grid_family=False)
    assert grid <= ALPHA + tol(ALPHA), grid
    assert per_cell > ALPHA + 8 * binomial_se(ALPHA, STUDIES), per_cell


@pytest.mark.parametrize("n", [3, 5, 10])
def test_aa_fail_over_three_cells_is_at_most_alpha(n):
    rng = np.random.default_rng(2740 + n)
    holm, unadjusted = aa_grid(n, STUDIES, rng, alpha=ALPHA)
    assert holm <= ALPHA + tol(ALPHA), holm
    assert unadjusted > ALPHA + 8 * binomial_se(ALPHA, STUDIES), unadjusted


def test_no_definite_verdict_from_rounding():
    rng = np.random.default_rng(2750)
    for n in (5, 8):
        headline, halfway = rounding_verdicts(n, STUDIES, rng, alpha=ALPHA)
        assert headline == 0.0 and halfway == 0.0, (n, headline, halfway)


def test_conditional_control_error_is_measured_and_stated():
    """Issue 27 item 5: f = 0.5 (both definite verdicts wrong), gain -0.02. With equal variances the
    contrast is uncorrelated with the gain's estimate and the rate among established cells is alpha;
    with the treatment's sd 3x the parent's it exceeds alpha at n = 3 (the gate selects a low mean
    d, which shifts mean e: cov(e, d) = (1 - rho) var(p) - rho var(t)). This pins the rates the
    report's methods state (harness.report.stats.decisions.CONDITIONAL_RATES) within 4 SE."""
    studies = 20_000
    rng = np.random.default_rng(2760)
    for (n, sd_p, sd_t), stated in CONDITIONAL_RATES.items():
        p_est, cond, joint = conditional_control_error(
            n, studies, rng, sd_parent=sd_p, sd_treatment=sd_t, alpha=ALPHA
        )
        assert joint <= ALPHA + tol(ALPHA, studies)  # the unconditional wrong rate stays below alpha
        assert abs(cond - stated) <= tol(stated, int(p_est * studies)), (n, sd_p, sd_t, cond, stated)
    equal = conditional_control_error(3, studies, rng, sd_parent=0.01, sd_treatment=0.01, alpha=ALPHA)[1]
    assert equal <= ALPHA + tol(ALPHA, studies // 3)


def test_simulate_command_prints_the_edge_tables(capsys):
    assert main(["--tables", "edges", "--studies", "300", "--seed", "3"]) == 0
    out = capsys.readouterr().out
    for title in (
        "Divergence: true null",
        "Gain absent",
        "Families across the grid",
        "A/A check on a correct",
        "Controls conditional on the gate",
        "Float rounding only",
    ):
        assert title in out
