"""harness plan (harness/report/stats/seed_planning.py, DESIGN section 8): paired sds from a pilot or given, MDE at the
grid's seeds, seeds needed for min_effect_nats, cost in runs, tokens and worker-hours; the command on
a real results store. CPU only, a few seconds:

    python -m pytest -q tests/stats/test_planning.py
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from statsmodels.stats.power import TTestPower

from harness.cli import main as cli
from harness.design.analysis_plan import AnalysisPlan
from harness.report.simulation.synthetic import synthetic_frames
from harness.report.stats import decisions as dec
from harness.report.stats.analysis import analyze
from harness.report.stats.looks import increments
from harness.report.stats.power import mde, seeds_needed
from harness.report.stats.seed_planning import (
    JSON_KEYS,
    GridShape,
    Throughput,
    pilot_sds,
    plan_rows,
    sd_interval,
    throughput,
)
from harness.store.store import Store

DEMO = Path(__file__).resolve().parents[2] / "ablations" / "rd_controls_small.toml"
VARIANTS = ("block_attnres", "rd_attnres", "param_matched", "dup_route", "fixed_v", "dup_route_tied")


DEFAULT_PLAN = AnalysisPlan(min_effect_nats=0.01)


def shape(plan=DEFAULT_PLAN, n_seeds=3, cells=(("small", 100_000),)):
    return GridShape(
        "g",
        plan,
        n_seeds,
        "block_attnres",
        "rd_attnres",
        ("param_matched", "dup_route", "fixed_v"),
        tuple((s, b, VARIANTS) for s, b in cells),
    )


def test_given_sd_rows_match_the_power_functions():
    speed = {"small": Throughput(500.0, "test")}
    rows = plan_rows(shape(), sd=0.006, speed=speed)
    assert [r.comparison for r in rows] == [
        "rd_attnres - block_attnres",
        "rd_attnres - block_attnres (absent, true gain 0)",
        "param_matched (contrast)",
        "dup_route (contrast)",
        "fixed_v (contrast)",
    ]
    head, absent, contrast = rows[0], rows[1], rows[2]
    # Showing the gain absent (< 0.01) when it is 0 needs the seeds the headline needs for 0.01 (DESIGN 6):
    # checked against a simulation of the report's absence test at that many seeds.
    assert (absent.kind, absent.seeds_needed, absent.planned_effect_nats) == (
        "absence",
        head.seeds_needed,
        0.01,
    )
    rng = np.random.default_rng(5)
    d = rng.normal(0.0, 0.006, (4000, 1, absent.seeds_needed))
    p_abs, _ = dec.absence_p(d, 0.01)
    rate = dec.decide_absence(np.full(p_abs.shape, absent.seeds_needed), d.mean(axis=-1), p_abs, 0.01, 0.05)[
        1
    ].mean()
    power = TTestPower().power(
        effect_size=0.01 / 0.006, nobs=absent.seeds_needed, alpha=0.05, alternative="larger"
    )
    assert power >= 0.8 and abs(rate - power) <= 4 * math.sqrt(power * (1 - power) / 4000), (rate, power)
    assert head.mde_nats == mde(0.006, 3, 0.05, 0.8, "one-sided")
    assert contrast.mde_nats == mde(0.006, 3, 0.05, 0.8, "two-sided")
    want = seeds_needed(0.01, 0.006, 0.05, 0.8, "one-sided", 30)
    assert head.seeds_needed == want.n == 4 and head.reachable
    assert contrast.planned_effect_nats == 0.005
    assert contrast.seeds_needed == seeds_needed(0.005, 0.006, 0.05, 0.8, "two-sided", 30).n
    assert head.runs == 6 * 4 and head.tokens == 24 * 100_000
    assert head.est_hours == pytest.approx(head.tokens / 500.0 / 3600)
    js = head.as_json()
    assert tuple(js)[: len(JSON_KEYS)] == JSON_KEYS and js["sd_nats"] == 0.006 and js["n_seeds"] == 3


def test_unreachable_unknown_speed_and_no_min_effect():
    rows = plan_rows(shape(), sd=0.05, speed={})
    assert not rows[0].reachable and rows[0].seeds_needed is None and rows[0].runs is None
    assert rows[0].as_json()["seeds_needed"] is None and rows[0].power_at_max < 0.8
    ok = plan_rows(shape(), sd=0.006, speed={})[0]
    assert ok.runs == 24 and ok.est_hours is None  # throughput unknown
    none = plan_rows(shape(AnalysisPlan()), sd=0.006)[0]
    assert none.seeds_needed is None and none.planned_effect_nats is None and none.mde_nats > 0


def test_plan_with_looks_reads_the_grids_seeds_at_their_look():
    plan = AnalysisPlan(min_effect_nats=0.01, looks=(3, 5, 10))
    row = plan_rows(shape(plan, n_seeds=5), sd=0.006)[0]
    lv = increments(0.05, (3, 5, 10))[1]
    assert row.level == pytest.approx(lv) and row.mde_nats == pytest.approx(
        mde(0.006, 5, lv, 0.8, "one-sided")
    )
    assert row.seeds_needed in (3, 5, 10)
    early = plan_rows(shape(plan, n_seeds=2), sd=0.006)[0]
    assert early.mde_nats is None  # before the first look


def test_bad_sd_inputs():
    for sd in (0.0, -1.0, math.inf, math.nan):
        with pytest.raises(ValueError, match="positive number"):
            plan_rows(shape(), sd=sd)
    with pytest.raises(ValueError, match="exactly one"):
        plan_rows(shape())


def _pilot(budgets=(100_000,), effects=None, seeds=(0, 1, 2, 3)):
    f = synthetic_frames(grid="pilot", seeds=seeds, budgets=budgets, effects=effects, rng_seed=5)
    return f, analyze(f["final"], f["runs"], grid="pilot")


def _diffs(final, first, second, budget):
    sub = final.filter(pl.col("budget_tokens") == budget).sort("seed")
    a = sub.filter(pl.col("variant") == first)["val_nll"].to_numpy()
    return a - sub.filter(pl.col("variant") == second)["val_nll"].to_numpy()


def test_pilot_sds_are_the_pilots_paired_sds_per_cell():
    f, st = _pilot()
    sds = pilot_sds(st)
    d_tp = _diffs(f["final"], "rd_attnres", "block_attnres", 100_000)
    d_cp = _diffs(f["final"], "fixed_v", "block_attnres", 100_000)
    assert sds[("headline", "small", 100_000)].sd == pytest.approx(np.std(d_tp, ddof=1), rel=1e-12)
    assert sds[("fixed_v", "small", 100_000)].sd == pytest.approx(
        np.std(d_cp - 0.5 * d_tp, ddof=1), rel=1e-12
    )
    rows = {r.comparison: r for r in plan_rows(shape(), pilot=st)}
    assert rows["rd_attnres - block_attnres"].sd_nats == sds[("headline", "small", 100_000)].sd
    assert "over 4 seeds" in rows["fixed_v (contrast)"].sd_source


def test_pilot_fallbacks_nearest_budget_and_pooled_controls():
    effects = {"block_attnres": 0.0, "rd_attnres": -0.02, "param_matched": -0.01, "dup_route": 0.0}
    _, st = _pilot(budgets=(100_000, 1_000_000), effects=effects)
    sds = pilot_sds(st)
    rows = {
        (r.comparison, r.budget_tokens): r for r in plan_rows(shape(cells=(("small", 300_000),)), pilot=st)
    }
    head = rows[("rd_attnres - block_attnres", 300_000)]  # log distance: 300k is nearer 100k than 1M
    assert (
        head.sd_nats == sds[("headline", "small", 100_000)].sd and "nearest budget 100_000" in head.sd_source
    )
    fixed_v = rows[("fixed_v (contrast)", 300_000)]  # the pilot has no fixed_v: its two contrasts pooled
    a, b = sds[("param_matched", "small", 100_000)], sds[("dup_route", "small", 100_000)]
    assert fixed_v.sd_nats == pytest.approx(math.sqrt((a.sd**2 + b.sd**2) / 2), rel=1e-12)
    assert "2 control contrasts pooled (no fixed_v runs)" in fixed_v.sd_source
    other = plan_rows(shape(cells=(("tiny", 100_000),)), pilot=st)[0]
    assert other.sd_nats is None and other.mde_nats is None and "no pairs at size tiny" in other.sd_source


def test_sd_interval_covers_the_true_sd_as_stated():
    """The 80 % factors for an sd with df degrees of freedom cover sigma / s in 80 % of normal samples."""
    rng = np.random.default_rng(4)
    for df in (2, 9):
        lo, hi = sd_interval(df)
        s = rng.normal(0, 1.0, size=(40_000, df + 1)).std(axis=1, ddof=1)
        covered = ((1.0 / s >= lo) & (1.0 / s <= hi)).mean()
        assert covered == pytest.approx(0.8, abs=4 * math.sqrt(0.16 / 40_000)), (df, covered)
    assert sd_interval(2) == pytest.approx((0.659, 3.081), abs=1e-3)


def test_throughput_from_runs_then_bench():
    runs = pl.DataFrame(
        {
            "size": ["small", "small", "small", "tiny"],
            "status": ["done", "done", "failed", "done"],
            "tokens_seen": [100_000, None, 50_000, 1000],
            "budget_tokens": [100_000] * 3 + [1000],
            "wall_s": [200.0, 300.0, 50.0, 2.0],
        }
    )
    bench = pl.DataFrame(
        {
            "bench_id": ["old", "new", "new", "new"],
            "created_at": ["2026-01-01", "2026-02-01", "2026-02-01", "2026-02-01"],
            "size": ["120m"] * 4,
            "variant": ["lightning", "lightning", "bare", "rd_attnres"],
            "tokens_per_s": [10.0, 900.0, 1000.0, 950.0],
        }
    )
    t = throughput(runs, bench)
    assert t["small"].tokens_per_s == pytest.approx(
        200_000 / 500.0
    )  # failed runs left out; tokens_seen else budget
    assert "2 finished runs" in t["small"].source
    assert t["120m"].tokens_per_s == 900.0 and "harness bench new" in t["120m"].source
    assert throughput(None, None) == {}


def _write_store(results: Path, frames: dict) -> None:
    store = Store(results)
    metrics = frames["metrics"].partition_by("run_id", as_dict=True)
    for run in frames["runs"].iter_rows(named=True):
        rid = run["run_id"]
        store.write_result(
            {
                "run": {**run, "config": json.loads(run["config"]), "tokens_seen": run["budget_tokens"]},
                "metrics": [
                    {k: v for k, v in m.items() if k != "run_id"}
                    for m in metrics[(rid,)].iter_rows(named=True)
                ],
            }
        )


@pytest.fixture
def pilot_store(tmp_path):
    frames = synthetic_frames(
        grid="pilot", seeds=(0, 1, 2), budgets=(100_000,), n_layers=2, n_evals=2, rng_seed=9
    )
    _write_store(tmp_path / "results", frames)
    return tmp_path / "results", frames


@pytest.mark.slow
def test_plan_command_with_a_pilot(pilot_store, capsys):
    results, frames = pilot_store
    assert cli(["plan", str(DEMO), "--pilot", "pilot", "--results", str(results)]) == 0
    out = capsys.readouterr().out
    assert "grid rd_controls_small: 3 seeds per cell" in out and "min_effect_nats 0.01" in out
    assert "throughput, size small: 1,667 tokens/s per worker, from 21 finished runs" in out  # 100k / 60 s
    assert "cell small/98_304 as written: 6 variants x 3 seeds = 18 runs, 1_769_472 tokens" in out
    assert "rd_attnres - block_attnres" in out and "fixed_v (contrast)" in out and "dup_route_tied" not in out
    assert cli(["plan", str(DEMO), "--pilot", "pilot", "--results", str(results), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == 5 and all(tuple(r)[: len(JSON_KEYS)] == JSON_KEYS for r in rows)
    assert (
        rows[1]["kind"] == "absence" and rows[1]["sd_nats"] == rows[0]["sd_nats"]
    )  # the headline's pilot sd
    d = _diffs(frames["final"], "rd_attnres", "block_attnres", 100_000)
    assert rows[0]["sd_nats"] == pytest.approx(np.std(d, ddof=1), rel=1e-12)
    assert rows[0]["mde_nats"] == pytest.approx(mde(rows[0]["sd_nats"], 3, 0.05, 0.8, "one-sided"), rel=1e-12)
    for r in rows:
        assert (r["seeds_needed"] is None) == (not r["reachable"])
        if r["reachable"]:
            assert (
                r["runs"] == 6 * r["seeds_needed"] and r["tokens"] == r["runs"] * 98_304
            )  # the grid's budget (the pilot ran 100_000)
            assert r["est_hours"] == pytest.approx(r["tokens"] / (100_000 / 60.0) / 3600)


def test_plan_command_without_min_effect_says_so(tmp_path, capsys):
    grid = tmp_path / "g.toml"
    grid.write_text(DEMO.read_text().replace("min_effect_nats = 0.01", ""))
    assert cli(["plan", str(grid), "--sd", "0.006", "--results", str(tmp_path / "none")]) == 0
    out = capsys.readouterr().out
    assert "min_effect_nats is not set in the grid's [analysis]" in out and "0.0138" in out  # the MDE still
    assert "throughput, size small: unknown" in out


def test_plan_prices_the_budgets_a_single_budget_grid_needs_for_a_multiplier(tmp_path, capsys):
    """DESIGN 14: one budget per size gives no compute multiplier; the plan prices the parent's runs at half and
    twice it (3 seeds: 6 runs, 3 x (49_152 + 196_608) tokens)."""
    assert cli(["plan", str(DEMO), "--sd", "0.006", "--results", str(tmp_path / "none")]) == 0
    out = capsys.readouterr().out
    assert (
        "multiplier: size small has one budget (98_304 tokens), so no compute multiplier; the parent "
        "(block_attnres) at 49_152 and 196_608 tokens gives one: 6 runs, 737_280 tokens, worker-hours unknown"
    ) in out


@pytest.mark.parametrize(
    "argv, message",
    [
        (["missing.toml", "--sd", "0.01"], "grid file missing.toml not found"),
        ([str(DEMO), "--sd", "0"], "--sd 0: must be a positive number of nats/token"),
        ([str(DEMO), "--sd", "-0.5"], "--sd -0.5: must be a positive number"),
        ([str(DEMO), "--sd", "abc"], "--sd abc: must be a positive number"),
        (
            [str(DEMO), "--sd", "0.01", "--pilot", "pilot"],
            "give either --pilot GRID_NAME or --sd NATS, not both",
        ),
        ([str(DEMO)], "the plan needs a paired sd"),
        ([str(DEMO), "--pilot", "nope"], "no runs of grid 'nope' in the results store; grids there: pilot"),
    ],
)
def test_plan_command_bad_input_is_one_line(pilot_store, capsys, argv, message):
    results, _ = pilot_store
    assert cli(["plan", *argv, "--results", str(results)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and message in err, err


def test_plan_command_pilot_without_a_store(tmp_path, capsys):
    assert cli(["plan", str(DEMO), "--pilot", "x", "--results", str(tmp_path / "none")]) == 2
    assert "no results store in" in capsys.readouterr().err
    assert not (tmp_path / "none").exists()  # nothing created
