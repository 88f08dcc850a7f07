"""Issue 38 items 4: the report proposes the factorial follow-up; `harness followup` writes it.

Fast tests use a real results store (harness.store.store.Store) holding synthetic result files; the slow one
trains a tiny grid on real text, writes the follow-up with `harness followup` and queues it.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest
import scipy.stats
import warm
from test_cli_startup import imported

from harness import cli
from harness.design.analysis_plan import AnalysisPlan
from harness.models.catalog import load_specs
from harness.report.followup import absorbing, cell_sds, composed_variant, plan_followup
from harness.report.render.sections import render_markdown, summary_lines
from harness.report.simulation.synthetic import frames_from_values
from harness.report.stats.analysis import analyze
from harness.report.stats.looks import increments
from harness.report.stats.power import planned_seeds, power_at
from harness.scheduling.grids.grid import parse_grid

SAMPLE = Path(__file__).resolve().parents[3] / "shared/data/fineweb_edu_sample"
GRID = "absorb"
TRAIN = {"vocab_size": 512, "batch_tokens": 1024, "lr": 0.002}
RNG = np.random.default_rng(3840)
PARENT = 3.9 + RNG.normal(0, 0.02, 6)
VALUES = {  # param_matched does 4x better than the treatment; fixed_v about as well
    "block_attnres": list(PARENT),
    "rd_attnres": list(PARENT - 0.03 + RNG.normal(0, 0.012, 6)),
    "param_matched": list(PARENT - 0.12 + RNG.normal(0, 0.012, 6)),
    "fixed_v": list(PARENT - 0.03 + RNG.normal(0, 0.004, 6)),
}
PLAN = {"min_effect_nats": 0.02, "looks": [], "max_seeds": 16}


def write_store(results: Path, values=VALUES, status: str = "done") -> None:
    """A results folder as workers write it: one result file per run, with the grid's config."""
    from harness.store.store import Store

    store = Store(results)
    frames = frames_from_values(values, grid=GRID)
    for run in frames["runs"].iter_rows(named=True):
        config = {**json.loads(run["config"]), "corpus": str(SAMPLE), "train": TRAIN, "analysis": PLAN}
        nll = values[run["variant"]][run["seed"]]
        row = {**run, "config": config, "status": status, "wall_s": 30.0, "tokens_seen": run["budget_tokens"]}
        row["error"] = None if status == "done" else "loss became NaN"
        metrics = [dict(step=10, tokens=run["budget_tokens"], split="val", name="nll", value=float(nll))]
        store.write_result({"run": row, "metrics": metrics if status == "done" else [], "routing": []})


def followup(results: Path, out: Path, absorb: str = "param_matched", grid: str = GRID, capsys=None):
    rc = cli.main(
        ["followup", "--grid", grid, "--absorb", absorb, "--out", str(out), "--results", str(results)]
    )
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def test_the_report_proposes_the_followup_where_a_control_does_better():
    frames = frames_from_values(VALUES, grid=GRID)
    stats = analyze(frames["final"], frames["runs"], grid=GRID, plan=AnalysisPlan(min_effect_nats=0.02))
    (a,) = absorbing(stats)
    assert a.control == "param_matched" and a.verdict == "reproduces gain" and a.fraction_low > 1
    fv = next(x for x in stats.assessments if x.control == "fixed_v")
    assert fv.fraction_low < 1 < fv.fraction_high  # does not do better than the treatment: no follow-up
    md = render_markdown(stats, [])
    assert (
        f"param_matched does better than rd_attnres (gain fraction {a.fraction:.2f}, 95 % interval "
        f"{a.fraction_low:.2f} to {a.fraction_high:.2f}, above 1)"
    ) in md
    assert "parent block_attnres (0, 0), param_matched (1, 0), rd_attnres (0, 1), rd_offset (1, 1)" in md
    assert (
        f"`harness followup --grid {GRID} --absorb param_matched --out {GRID}_param_matched_factorial.toml`"
        in md
    )
    assert "fixed_v does better" not in md
    assert any(line.startswith("follow-up: param_matched") for line in summary_lines(stats))


def test_a_grid_that_is_already_the_factorial_is_not_sent_to_write_it():
    """In a grid whose [factorial] already crosses param_matched with the treatment, its factorial
    section is the follow-up: no proposal to write another grid."""
    values = {**VALUES, "rd_offset": list(PARENT - 0.13 + RNG.normal(0, 0.012, 6))}
    del values["fixed_v"]
    fac = parse_grid(
        {
            "name": GRID,
            "corpus": str(SAMPLE),
            "sizes": ["tiny"],
            "seeds": [0, 1, 2],
            "budgets_tokens": [4096],
            "variants": {
                "block_attnres": "parent",
                "rd_attnres": "treatment",
                "param_matched": "control",
                "rd_offset": "reference",
            },
            "factorial": {
                "factors": ["offset", "decoupled_v"],
                "levels": {
                    "block_attnres": [0, 0],
                    "param_matched": [1, 0],
                    "rd_attnres": [0, 1],
                    "rd_offset": [1, 1],
                },
            },
        }
    ).analysis.factorial
    frames = frames_from_values(values, grid=GRID)
    plain = analyze(frames["final"], frames["runs"], grid=GRID, plan=AnalysisPlan(min_effect_nats=0.02))
    crossed = analyze(
        frames["final"], frames["runs"], grid=GRID, plan=AnalysisPlan(min_effect_nats=0.02, factorial=fac)
    )
    assert "param_matched" in [a.control for a in absorbing(plain)]
    assert absorbing(crossed) == ()
    assert "harness followup" not in render_markdown(crossed, [])


def test_composed_variant_is_the_treatment_with_the_controls_additions():
    specs = load_specs()
    assert composed_variant("rd_attnres", "param_matched", "block_attnres", specs) == "rd_offset"
    # fixed_v adds a query and a route, dup_route likewise: no shipped spec composes them with rd_attnres.
    assert composed_variant("rd_attnres", "fixed_v", "block_attnres", specs) is None
    assert composed_variant("rd_attnres", "dup_route_tied", "block_attnres", specs) is None


def test_followup_writes_a_grid_whose_plan_is_powers(tmp_path, capsys):
    results, out = tmp_path / "results", tmp_path / "absorb_factorial.toml"
    write_store(results)
    rc, printed, err = followup(results, out, capsys=capsys)
    assert rc == 0, err
    text = out.read_text()
    grid = parse_grid(tomllib.loads(text), path=out)
    assert grid.name == "absorb_factorial" and grid.corpus == str(SAMPLE)
    assert grid.variants == {
        "block_attnres": "parent",
        "rd_attnres": "treatment",
        "param_matched": "control",
        "rd_offset": "reference",
    }
    f = grid.analysis.factorial
    assert f.factors == ("param_matched", "rd_attnres") and f.variant(1, 1) == "rd_offset"
    assert grid.train == TRAIN and grid.sizes == ("small",) and grid.budgets_tokens == (1_000_000,)
    # The plan: the interaction sd from the store's pairs, looks (n/2, n) with the smallest n that power.py
    # says reaches the plan's power for min_effect_nats, two-sided, at Holm's alpha / 5 (the interaction is
    # tested among one cell's 5 factorial contrasts).
    d = {v: np.array(x) - PARENT for v, x in VALUES.items()}
    sd = math.hypot(np.std(d["rd_attnres"], ddof=1), np.std(d["param_matched"], ddof=1))
    a = grid.analysis
    n = a.looks[-1]
    assert (
        a.min_effect_nats == 0.02
        and a.looks == (n // 2, n)
        and a.max_seeds == n
        and grid.seeds == tuple(range(n // 2))
    )
    assert a.alpha == 0.05
    assert planned_seeds(0.02, sd, dataclasses.replace(a, alpha=0.01), "two-sided").reachable
    smallest = next(
        m
        for m in range(6, 31, 2)
        if planned_seeds(
            0.02, sd, AnalysisPlan(alpha=0.01, min_effect_nats=0.02, looks=(m // 2, m)), "two-sided"
        ).reachable
    )
    assert n == smallest  # the fewest seeds (looks at m / 2 and m) whose last look reaches power 0.8
    assert f"interaction sd {sd:.4g}" in text and "sqrt 2 times one difference's" in text
    assert f"up to look 1 ({n // 2} seeds): {4 * (n // 2)} runs" in text and "tokens/s per worker" in text
    assert "not queued; next: harness queue" in printed
    assert (
        "# Why: param_matched reproduces rd_attnres's gain and does better than it at small, 1_000_000"
        in text
    )


def test_followup_refuses_in_one_line(tmp_path, capsys):
    results = tmp_path / "results"
    write_store(results)
    out = tmp_path / "f.toml"
    out.write_text("keep me")
    cases = [
        (dict(out=out), f"--out {out}: exists; followup never overwrites a file"),
        (dict(grid="nope"), "no runs of grid 'nope' in the results store; grids there: absorb"),
        (dict(absorb="dup_route"), "--absorb dup_route: not a control of grid absorb; its controls: "),
        (
            dict(absorb="fixed_v"),
            "--absorb fixed_v: no composed variant = rd_attnres with fixed_v's additions",
        ),
    ]
    for change, message in cases:
        kw = dict(out=tmp_path / "new.toml", absorb="param_matched", grid=GRID) | change
        rc, _, err = followup(results, kw["out"], absorb=kw["absorb"], grid=kw["grid"], capsys=capsys)
        assert rc != 0 and message in err and len(err.strip().splitlines()) == 1, err
    assert out.read_text() == "keep me" and not (tmp_path / "new.toml").exists()
    diverged = tmp_path / "diverged"
    write_store(diverged, status="diverged")
    rc, _, err = followup(diverged, tmp_path / "new.toml", capsys=capsys)
    assert rc != 0 and "no finished runs to plan from" in err, err


def test_followup_help_loads_no_heavy_package():
    """The command's module and its options load none of them; `harness followup --help` no torch, DuckDB or
    polars (submitit comes from the CLI's other command modules today, not from this one)."""
    code = "import argparse, harness.commands.followup as f; f.add_arguments(argparse.ArgumentParser())"
    proc = subprocess.run([sys.executable, "-X", "importtime", "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    names = {
        line.rsplit("|", 1)[-1].strip().split(".")[0] for line in proc.stderr.splitlines() if "|" in line
    }
    assert "harness" in names and not names & {"torch", "duckdb", "polars", "submitit"}
    mods = imported("followup", "--help")
    assert not mods & {"torch", "duckdb", "polars"}, sorted(mods & {"torch", "duckdb", "polars"})


def test_plan_followup_says_when_the_interaction_is_out_of_reach():
    frames = frames_from_values(VALUES, grid=GRID)
    (cell,) = cell_sds(analyze(frames["final"], frames["runs"], grid=GRID), "param_matched")
    noisy = type(cell)(cell.size, cell.budget_tokens, cell.n, 0.2, 0.2, cell.gain)
    fp = plan_followup((noisy,), AnalysisPlan(min_effect_nats=0.02, max_seeds=16))
    assert (fp.reachable, fp.looks) == (False, (15, 30)) and fp.power < 0.8


def test_plan_followup_prices_the_interaction_at_the_level_holm_will_test_it():
    """The follow-up's report tests the interaction among the grid's factorial contrasts with Holm (issue 53,
    row 14): its plan's power is the power at alpha / m, here checked against the noncentral t directly
    (scipy), and it is lower than the power at the plain alpha the plan used to quote."""
    frames = frames_from_values(VALUES, grid=GRID)
    (cell,) = cell_sds(analyze(frames["final"], frames["runs"], grid=GRID), "param_matched")
    source = AnalysisPlan(min_effect_nats=0.02, max_seeds=16)
    fp = plan_followup((cell,), source)
    assert fp.family == 5  # one cell: the two simple effects of each factor and the interaction
    assert fp.plan.alpha == source.alpha  # the written plan keeps alpha; Holm divides it when testing
    n = fp.looks[-1]
    level = float(increments(source.alpha / fp.family, fp.looks)[-1])
    nc = fp.effect / fp.sd * math.sqrt(n)
    crit = scipy.stats.t.ppf(1 - level / 2, n - 1)
    expected = scipy.stats.nct.sf(crit, n - 1, nc) + scipy.stats.nct.cdf(-crit, n - 1, nc)
    assert fp.power == pytest.approx(expected, rel=1e-6)
    plain = float(increments(source.alpha, fp.looks)[-1])
    assert fp.power < power_at(fp.effect, fp.sd, n, plain, "two-sided")
    # the smallest even n whose last look reaches the power at Holm's level: n - 2 does not
    if fp.reachable and n > 6:
        smaller = float(increments(source.alpha / fp.family, ((n - 2) // 2, n - 2))[-1])
        assert power_at(fp.effect, fp.sd, n - 2, smaller, "two-sided") < source.power


TINY = """
name = "fu_src"
corpus = "{corpus}"
sizes = ["tiny"]
seeds = [0, 1, 2]
budgets_tokens = [6144]
[variants]
block_attnres = "parent"
rd_attnres = "treatment"
param_matched = "control"
[train]
vocab_size = 512
batch_tokens = 1024
eval_tokens = 2048
eval_every_tokens = 3072
[analysis]
min_effect_nats = 0.02
"""


@pytest.mark.slow  # 103 s on 2 cores (shared): 9 tiny runs on real text, followup, queue
@pytest.mark.skipif(not SAMPLE.is_dir(), reason="sample corpus absent")
def test_followup_of_a_trained_grid_queues_as_written(tmp_path):
    grid = tmp_path / "fu_src.toml"
    grid.write_text(TINY.format(corpus=SAMPLE))
    env = {
        **os.environ,
        "HARNESS_RESULTS": str(tmp_path / "results"),
        "HARNESS_PROGRESS": "lines",
    }

    def harness(*args):
        proc = warm.run([sys.executable, "-m", "harness", *args], env=env, capture_output=True, text=True)
        assert proc.returncode == 0, f"harness {args}:\n{proc.stdout}\n{proc.stderr[-3000:]}"
        return proc.stdout

    assert "queued 9 runs" in harness("queue", str(grid))
    harness("work", "--threads", "1", "--quiet")
    out = tmp_path / "fu_factorial.toml"
    printed = harness("followup", "--grid", "fu_src", "--absorb", "param_matched", "--out", str(out))
    assert f"wrote {out}" in printed
    written = parse_grid(tomllib.loads(out.read_text()), path=out)
    assert written.train == dict(vocab_size=512, batch_tokens=1024, eval_tokens=2048, eval_every_tokens=3072)
    assert written.sizes == ("tiny",) and written.budgets_tokens == (6144,) and written.corpus == str(SAMPLE)
    n = len(written.seeds)
    assert f"queued {4 * n} runs" in harness("queue", str(out))


def test_the_followup_of_an_axis_grid_sweeps_the_same_axis(tmp_path, capsys):
    """A grid with [axes] lr: the follow-up grid's sizes are presets, its [axes] the cells' values, and lr is
    not fixed in its [train] (each cell's run carried its own)."""
    from harness.store.store import Store

    results, out = tmp_path / "results", tmp_path / "absorb_factorial.toml"
    store = Store(results)
    for lr in (0.001, 0.004):
        frames = frames_from_values(VALUES, grid=GRID)
        for run in frames["runs"].iter_rows(named=True):
            train = {**TRAIN, "lr": lr}
            config = {**json.loads(run["config"]), "corpus": str(SAMPLE), "train": train, "analysis": PLAN}
            config["axes"] = {"lr": lr}
            rid = f"{GRID}:small:{run['variant']}:s{run['seed']}:1000000:lr={lr}"
            nll = VALUES[run["variant"]][run["seed"]]
            row = {**run, "run_id": rid, "config": config, "status": "done", "wall_s": 30.0}
            metrics = [dict(step=10, tokens=run["budget_tokens"], split="val", name="nll", value=float(nll))]
            store.write_result({"run": row, "metrics": metrics, "routing": []})
    rc, _, err = followup(results, out, capsys=capsys)
    assert rc == 0, err
    grid = parse_grid(tomllib.loads(out.read_text()), path=out)
    assert grid.sizes == ("small",) and grid.axes == {"lr": (0.001, 0.004)}
    assert grid.train == {k: v for k, v in TRAIN.items() if k != "lr"}
    assert {r.run_id.rsplit(":", 1)[1] for r in grid.expand(cwd="/c")} == {"lr=0.001", "lr=0.004"}
