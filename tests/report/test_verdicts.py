"""Statistics plan v3 (issue 27, DESIGN 6): the issue's example studies through ``harness report``.

Each study is a synthetic results folder written as workers write it (one result file per run,
harness.store.store.Store), read by ``harness report`` through DuckDB, exactly as a user would. The values are
built so every paired difference is known: float rounding (1 ulp), divergence at the seeds where
the treatment would lose, a precise zero and an underpowered study. CPU only, a few seconds each.
"""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest
import scipy.stats as st

from harness import cli
from harness.report.build import Frames, build_report
from harness.report.simulation.synthetic import frames_from_values
from harness.report.stats.floors import FLOOR_NATS, aa_floor
from harness.report.stats.progress import QueuedRun

GRID = "v3"


def write_folder(
    results,
    values: dict[str, list[float | None]],
    *,
    lost: dict[tuple[str, int], str] | None = None,
    analysis: dict | None = None,
) -> None:
    """A results folder holding exactly ``values`` (variant -> final val NLL per seed 0..n-1).

    ``lost``: (variant, seed) -> error: that run is written as ``diverged`` with the error and no
    validation NLL. ``analysis``: the grid's [analysis] table, stored in every run's config.
    """
    from harness.store.store import Store

    store = Store(results)
    frames = frames_from_values(
        {v: [x if x is not None else 0.0 for x in vals] for v, vals in values.items()}, grid=GRID
    )
    for run in frames["runs"].iter_rows(named=True):
        nll = values[run["variant"]][run["seed"]]
        error = (lost or {}).get((run["variant"], run["seed"]))
        config = {**__import__("json").loads(run["config"]), "analysis": analysis or {}}
        row = {**run, "config": config, "status": "diverged" if error else "done", "error": error}
        metrics = (
            []
            if error
            else [dict(step=100, tokens=run["budget_tokens"], split="val", name="nll", value=float(nll))]
        )
        store.write_result({"run": row, "metrics": metrics, "routing": []})


def report(results, out, capsys):
    """``harness report`` on the folder: (stats.csv, report.md, stdout)."""
    rc = cli.main(["report", "--grid", GRID, "--results", str(results), "--out", str(out), "--no-figures"])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    return pl.read_csv(out / "stats.csv"), (out / "report.md").read_text(), cap.out


def row(table: pl.DataFrame, comparison: str) -> dict:
    return table.filter(pl.col("comparison") == comparison).row(0, named=True)


# Parents across the 4.0 exponent boundary: one ulp is 4.4e-16 below 4 and 8.9e-16 above.
PARENT = np.array([3.95, 4.02, 3.98, 4.05, 3.99, 4.01, 3.97, 4.03])


def test_divergence_at_the_losing_seeds_does_not_establish_the_gain(tmp_path, capsys):
    """Issue 27 item 2: d = [-.012, -.008, -.015, +.020, +.015], the treatment diverged at the last two.
    Dropping them gave n = 3, p = .0145, "gain established"; counted as losses it is undecided."""
    d = np.array([-0.012, -0.008, -0.015, 0.020, 0.015])
    parent = PARENT[:5]
    treat = list(parent[:3] + d[:3]) + [None, None]
    write_folder(
        tmp_path / "r",
        {"block_attnres": list(parent), "rd_attnres": treat},
        lost={("rd_attnres", 3): "loss became NaN at step 40", ("rd_attnres", 4): "loss became inf"},
    )
    table, md, out = report(tmp_path / "r", tmp_path / "o", capsys)
    assert st.ttest_1samp(d[:3], 0, alternative="less").pvalue < 0.05  # what dropping the pairs would claim
    tp = row(table, "rd_attnres - block_attnres")
    observed = parent[:3] + d[:3] - parent[:3]
    m = np.abs(observed).max()
    tested = np.concatenate([observed, [m, m]])
    assert tp["verdict"] == "undecided" and tp["n_pairs"] == 3  # 3 observed pairs; the verdict uses 5
    assert (tp["test_pairs"], tp["test_seeds"], str(tp["imputed_seeds"])) == (5, "0 1 2 3 4", "3 4")
    assert tp["p_one_sided"] == pytest.approx(st.ttest_1samp(tested, 0, alternative="less").pvalue, abs=1e-12)
    assert tp["p_one_sided"] > 0.3
    assert "seed(s) 3, 4 count as losses" in tp["note"]
    assert f"Seed(s) 3, 4 count as losses of rd_attnres, which diverged there (d = {m:+.4g}" in md
    assert "**undecided** (n = 5," in md and "undecided (n = 5," in out
    warnings = md[md.index("## Warnings") : md.index("## How to read")]
    assert "rd_attnres diverged at seed(s) 3 4" in warnings and "counts as a loss for it" in warnings
    # The methods state every v3 rule, and the conditional rate of the controls with its numbers.
    methods = md[md.index("## Methods") :]
    assert "Divergence is the worst outcome (worst-case imputation)" in methods
    assert (
        "No verdict from rounding" in methods
        and "Holm over every assessed (cell, control) contrast" in methods
    )
    assert "n = 3, sd parent 0.005 / treatment 0.015: 0.064" in methods


def test_one_ulp_treatment_is_undecided_and_a_control_equal_to_it_is_degenerate(tmp_path, capsys):
    """Issue 27 item 3: treatment = parent - 1 ulp at 5 seeds (mean d ~ -6e-16) was "gain established"
    (p .0019) and a control equal to the treatment "reproduces gain"."""
    parent = PARENT[:5]
    treat = np.nextafter(parent, -np.inf)
    d = treat - parent
    assert np.all(d < 0) and np.ptp(d) > 0 and abs(d.mean()) < 1e-15
    write_folder(
        tmp_path / "r",
        {"block_attnres": list(parent), "rd_attnres": list(treat), "param_matched": list(treat)},
    )
    table, md, out = report(tmp_path / "r", tmp_path / "o", capsys)
    tp = row(table, "rd_attnres - block_attnres")
    assert tp["verdict"] == "undecided" and tp["reason"] == "mean within the numerical floor"
    # Zero spread is absolute: the t p is undefined, the exact sign-flip p (1/32) is the only p, and
    # it is significant: the floor alone keeps the verdict from resting on rounding.
    assert tp["p_one_sided_test"] == "exact sign-flip" and tp["p_one_sided"] == pytest.approx(
        1 / 32, abs=1e-15
    )
    assert math.isnan(tp["t_p"]) and tp["numerical_floor"] == FLOOR_NATS
    cp = row(table, "param_matched - block_attnres")
    assert (
        cp["verdict"] == "invalid: degenerate"
        and "within the numerical floor (1e-06 nats/token)" in cp["note"]
    )
    assert f"\\|mean d\\| <= {FLOOR_NATS:g} nats/token, the numerical floor" in md
    # With a min_effect_nats the same study shows the gain absent: d + delta is far above the floor.
    write_folder(
        tmp_path / "r2",
        {"block_attnres": list(parent), "rd_attnres": list(treat)},
        analysis={"min_effect_nats": 0.01},
    )
    table, md, _ = report(tmp_path / "r2", tmp_path / "o2", capsys)
    tp = row(table, "rd_attnres - block_attnres")
    assert tp["verdict"] == "gain absent (< 0.01 nats/token)" and tp["absence_p"] == pytest.approx(
        1 / 32, abs=1e-15
    )


def test_aa_one_ulp_above_the_parent_passes(tmp_path, capsys):
    """Issue 27 item 3: A/A = parent + 1 ulp at 6 seeds was "FAIL" (the harness is broken)."""
    parent = PARENT[:6]
    aa = np.nextafter(parent, np.inf)
    write_folder(
        tmp_path / "r",
        {"block_attnres": list(parent), "rd_attnres": list(parent - 0.03), "dup_route_tied": list(aa)},
    )
    table, md, out = report(tmp_path / "r", tmp_path / "o", capsys)
    a = row(table, "dup_route_tied - block_attnres")
    assert a["verdict"] == "pass"  # DESIGN 6: an A/A offset within the floor is `pass`
    # The offset test alone rejects (all 6 differences positive: exact p = 2/64): the floor decides.
    assert a["perm_p"] == pytest.approx(2 / 64, abs=1e-15) and a["holm_p"] == pytest.approx(2 / 64, abs=1e-15)
    assert (
        a["numerical_floor"] == aa_floor(np.concatenate([parent, aa])) == float(np.spacing(np.float32(4.05)))
    )
    assert "| dup_route_tied | small, 1M | **pass** |" in md
    assert "mean offset within the float32 rounding of the NLL" in out and "FAIL" not in out


def test_a_control_exactly_halfway_gets_no_definite_verdict(tmp_path, capsys):
    """Issue 27 item 3: c = (p + t) / 2, so e = 0 in exact arithmetic; at n = 8 rounding gave a
    definite verdict in 5.8 % of studies. Established gain; the contrast is within the floor."""
    parent = PARENT
    for seed in range(2000):  # a study whose rounding errors all have one sign: the exact p is 2/256
        treat = parent - 0.02 + np.random.default_rng(seed).normal(0, 0.003, parent.size)
        half = (parent + treat) / 2
        e = (half - parent) - 0.5 * (
            treat - parent
        )  # as harness.report.stats.decisions.reproduction_contrast computes it
        if np.all(e > 0) or np.all(e < 0):
            break
    else:
        raise AssertionError("no study with one-signed rounding in 2000 draws")
    write_folder(
        tmp_path / "r", {"block_attnres": list(parent), "rd_attnres": list(treat), "fixed_v": list(half)}
    )
    table, md, _ = report(tmp_path / "r", tmp_path / "o", capsys)
    assert row(table, "rd_attnres - block_attnres")["verdict"] == "gain established"
    c = row(table, "fixed_v - block_attnres")
    assert c["contrast_mean"] == pytest.approx(e.mean(), abs=0) and abs(c["contrast_mean"]) < 1e-15
    # The test alone would decide (exact sign-flip p 2/256 at zero spread); the floor keeps it inconclusive.
    assert c["contrast_test"] == "exact sign-flip" and c["contrast_p"] == pytest.approx(2 / 256, abs=1e-15)
    assert c["verdict"] == "inconclusive" and c["reason"] == "mean within the numerical floor"


def test_a_precise_zero_is_absent_and_an_underpowered_study_is_undecided(tmp_path, capsys):
    """Issue 27 item 1: "not established" said the same for both; now a precise zero is "gain absent"
    with its upper bound printed, and an underpowered study is "undecided" with the seeds that would decide."""
    rng = np.random.default_rng(1)
    parent = PARENT[:5]
    write_folder(
        tmp_path / "zero",
        {"block_attnres": list(parent), "rd_attnres": list(parent + rng.normal(0, 5e-4, 5))},
        analysis={"min_effect_nats": 0.01},
    )
    table, md, out = report(tmp_path / "zero", tmp_path / "o1", capsys)
    tp = row(table, "rd_attnres - block_attnres")
    nll = pl.read_csv(tmp_path / "o1" / "pairs.csv").filter(
        pl.col("comparison") == "rd_attnres - block_attnres"
    )
    d = nll["diff"].to_numpy()
    p_abs = st.ttest_1samp(d + 0.01, 0, alternative="greater").pvalue
    assert tp["verdict"] == "gain absent (< 0.01 nats/token)" and tp["absence_p"] == pytest.approx(
        p_abs, abs=1e-12
    )
    upper = -d.mean() + st.t.isf(0.05, 4) * d.std(ddof=1) / math.sqrt(5)  # one cell: Holm level = alpha
    assert tp["gain_upper"] == pytest.approx(upper, abs=1e-12) and upper < 0.01
    assert f"the gain is at most {upper:.3g} nats/token" in md and "gain absent (< 0.01 nats/token)" in out

    write_folder(
        tmp_path / "weak",
        {"block_attnres": list(parent[:3]), "rd_attnres": list(parent[:3] + np.array([-0.03, 0.01, -0.01]))},
        analysis={"min_effect_nats": 0.01},
    )
    table, md, out = report(tmp_path / "weak", tmp_path / "o2", capsys)
    tp = row(table, "rd_attnres - block_attnres")
    assert tp["verdict"] == "undecided" and tp["absence_holm_p"] >= 0.05 and tp["holm_p"] >= 0.05
    assert "Undecided; what would decide it: to establish the observed gain (+0.0100 nats/token)" in md
    assert "to show it absent (< 0.01 nats/token) at the observed gain" in md


def test_a_run_without_a_result_file_is_warned_at_the_top(tmp_path):
    """Issue 27 item 6: the queue says a run finished but the store has no result for it."""
    frames = frames_from_values(
        {"block_attnres": list(PARENT[:3]), "rd_attnres": list(PARENT[:3] - 0.03)}, grid=GRID
    )
    queue = {r: "done" for r in frames["runs"]["run_id"].to_list()}
    queue["rd_attnres-s3"] = QueuedRun("done", "rd_attnres", "treatment", 3, "small", 1_000_000)
    build_report(Frames(frames["final"], frames["runs"]), tmp_path, grid=GRID, figures=False, queue=queue)
    md = (tmp_path / "report.md").read_text()
    warnings = md[md.index("## Warnings") : md.index("## How to read")]
    assert (
        "1 run(s) have no usable result (the queue says finished but no result file is in the store): "
        "rd_attnres s3 (size small, budget 1_000_000 tokens)"
    ) in warnings


# --------------------------------------------------------------------------- the new rules, against independent computations


def test_absence_p_and_the_bound_equal_scipy():
    rng = np.random.default_rng(3)
    from harness.report.stats import decisions as dec

    for _ in range(20):
        n = int(rng.integers(3, 12))
        d = rng.normal(-0.002, 0.004, n)
        p, exact = dec.absence_p(d, 0.01)
        assert not exact and p == pytest.approx(
            st.ttest_1samp(d + 0.01, 0, alternative="greater").pvalue, abs=1e-12
        )
        level = float(rng.uniform(0.005, 0.1))
        ci = st.t.interval(1 - 2 * level, n - 1, loc=d.mean(), scale=st.sem(d))  # two-sided 1 - 2 level
        assert dec.gain_upper_bound(d, level) == pytest.approx(-ci[0], abs=1e-12)  # upper bound on -mean d
    with pytest.raises(ValueError, match="delta"):
        dec.absence_p([0.1, 0.2, 0.3], 0.0)


def test_holm_levels_reject_exactly_where_holm_does(cheap_gc):
    from statsmodels.stats.multitest import multipletests

    from harness.report.stats import decisions as dec

    rng = np.random.default_rng(4)
    for _ in range(300):
        m = int(rng.integers(1, 7))
        p = rng.uniform(0, 0.1, m) ** rng.uniform(0.5, 2)
        levels = dec.holm_levels(p, 0.05)
        reject = multipletests(p, alpha=0.05, method="holm")[0]
        assert ((p < levels) == reject).all(), (p, levels, reject)


def test_lost_runs_are_numerical_failures_only():
    from harness.report.stats.divergence import is_lost, worst_case

    assert is_lost("diverged", "diverged: loss became NaN")
    for reason in (
        "failed: loss is NaN at step 40",
        "failed: FloatingPointError: overflow",
        "failed: inf loss",
        "failed: non-finite gradient",
    ):
        assert is_lost("failed", reason), reason
    for reason in (
        "failed: RuntimeError: CUDA out of memory",
        "failed: no error message stored",
        "failed: information lost",
    ):
        assert not is_lost("failed", reason), reason
    t = worst_case([4, 0, 2], [-0.01, 0.02, -0.03], {1: (1, "t", "diverged"), 3: (-1, "p", "diverged")}, [5])
    assert (
        t.seeds == (0, 1, 2, 3, 4) and t.d.tolist() == [0.02, 0.03, -0.03, -0.03, -0.01] and t.dropped == (5,)
    )
    with pytest.raises(ValueError, match="both observed and lost"):
        worst_case([1], [0.1], {1: (1, "t", "x")})
