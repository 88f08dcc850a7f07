"""The analysis plan (harness/design/analysis_plan.py, DESIGN section 6): the grid's [analysis] table, checked at
queue time, stored with every run, fixed once runs exist. CPU only, ~3 s:

    python -m pytest -q tests/design/test_plan.py
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.cli import main as cli
from harness.design.analysis_plan import AnalysisPlan, parse_plan, plan_from_configs
from harness.scheduling.grids.grid import load_grid
from harness.scheduling.queue.run_queue import RunQueue

from queue_stubs import write_grid  # tests/ is on sys.path under pytest (no package)

pytestmark = pytest.mark.own_cache  # its commands build their corpus in RESULTS/cache (conftest)


def write(tmp_path: Path, analysis: str = "", seeds: str = "[0, 1]") -> Path:
    """The queue tests' grid (3 variants, tiny, 1024 tokens) with an [analysis] table appended."""
    return write_grid(tmp_path, seeds=seeds, extra=analysis)


def test_defaults_and_a_full_table():
    assert parse_plan({}, source="defaults") == AnalysisPlan()
    assert AnalysisPlan().as_config() == {
        "alpha": 0.05,
        "reproduce_fraction": 0.5,
        "min_effect_nats": None,
        "power": 0.8,
        "max_seeds": 30,
        "looks": [],
    }
    plan = parse_plan(
        {
            "alpha": 0.01,
            "reproduce_fraction": 0.25,
            "min_effect_nats": 0.005,
            "power": 0.9,
            "max_seeds": 12,
            "looks": [3, 5, 10],
        }
    )
    assert (
        plan.alpha,
        plan.reproduce_fraction,
        plan.min_effect_nats,
        plan.power,
        plan.max_seeds,
        plan.looks,
    ) == (0.01, 0.25, 0.005, 0.9, 12, (3, 5, 10))
    assert parse_plan(plan.as_config()) == plan  # round trip through a run config (source "[analysis]")


BAD = {
    "unknown key": ({"alfa": 0.05}, ["analysis.alfa", "unknown key", "alpha ("]),
    "alpha 0": ({"alpha": 0}, ["analysis.alpha", "out of range", "0 < alpha < 0.5"]),
    "alpha 0.5": ({"alpha": 0.5}, ["analysis.alpha", "out of range"]),
    "alpha a string": ({"alpha": "0.05"}, ["analysis.alpha", "is not a number"]),
    "rho 1": ({"reproduce_fraction": 1.0}, ["analysis.reproduce_fraction", "0 < rho < 1"]),
    "rho 0": ({"reproduce_fraction": 0}, ["analysis.reproduce_fraction", "out of range"]),
    "power 1": ({"power": 1}, ["analysis.power", "0 < power < 1"]),
    "min effect 0": ({"min_effect_nats": 0.0}, ["analysis.min_effect_nats", "must be > 0"]),
    "min effect negative": ({"min_effect_nats": -0.01}, ["analysis.min_effect_nats", "must be > 0"]),
    "min effect bool": ({"min_effect_nats": True}, ["analysis.min_effect_nats", "is not a number"]),
    "max_seeds 2": ({"max_seeds": 2}, ["analysis.max_seeds", "out of range", ">= 3"]),
    "max_seeds float": ({"max_seeds": 10.0}, ["analysis.max_seeds", "is not an integer"]),
    "looks not increasing": ({"looks": [3, 5, 5]}, ["analysis.looks", "not increasing (5 after 5)"]),
    "looks decreasing": ({"looks": [5, 3]}, ["analysis.looks", "not increasing"]),
    "looks below 3": ({"looks": [2, 5]}, ["analysis.looks", "2 is out of range"]),
    "looks above max_seeds": ({"looks": [3, 40]}, ["analysis.looks", "40 is out of range", "max_seeds = 30"]),
    "looks not a list": ({"looks": 3}, ["analysis.looks", "must be a list"]),
    "not a table": (5, ["analysis", "must be a table"]),
    "min_multiplier 1": ({"min_multiplier": 1}, ["analysis.min_multiplier", "out of range", "> 1"]),
    "min_multiplier a string": ({"min_multiplier": "1.1"}, ["analysis.min_multiplier", "is not a number"]),
}


def test_min_multiplier_defaults_to_1_05_and_is_stored_only_when_set():
    """DESIGN 14: a plan that leaves it out stores what it stored before (older grids' plans stay equal)."""
    plan = parse_plan({})
    assert plan.min_multiplier == 1.05 and "min_multiplier" not in plan.as_config()
    set_ = parse_plan({"min_multiplier": 1.2})
    assert set_.min_multiplier == 1.2 and set_.as_config()["min_multiplier"] == 1.2
    assert parse_plan(set_.as_config()) == parse_plan({"min_multiplier": 1.2})


@pytest.mark.parametrize("case", list(BAD), ids=list(BAD))
def test_bad_plans_are_refused_naming_the_key(case):
    table, needles = BAD[case]
    with pytest.raises(ValueError) as info:
        parse_plan(table, where="g.toml")
    msg = str(info.value)
    assert msg.startswith("g.toml: analysis")
    for needle in needles:
        assert needle in msg, (needle, msg)


def test_grid_stores_the_plan_in_every_run_config(tmp_path):
    grid = load_grid(write(tmp_path, "\n[analysis]\nmin_effect_nats = 0.01\nlooks = [3, 5]\n"))
    assert grid.analysis.min_effect_nats == 0.01 and grid.analysis.source == "[analysis]"
    runs = grid.expand()
    assert {r.analysis["min_effect_nats"] for r in runs} == {0.01}
    assert all(
        r.analysis
        == {
            "alpha": 0.05,
            "reproduce_fraction": 0.5,
            "min_effect_nats": 0.01,
            "power": 0.8,
            "max_seeds": 30,
            "looks": [3, 5],
        }
        for r in runs
    )
    assert plan_from_configs([r.to_dict() for r in runs]).min_effect_nats == 0.01
    assert plan_from_configs([{"grid": "adhoc"}]).source == "defaults"


def test_queue_refuses_a_bad_plan_before_enqueuing_anything(tmp_path, capsys):
    results = tmp_path / "results"
    rc = cli(["queue", str(write(tmp_path, "\n[analysis]\nalpha = 0.7\n")), "--results", str(results)])
    err = capsys.readouterr().err
    assert rc == 2 and "analysis.alpha: 0.7 is out of range" in err and len(err.strip().splitlines()) == 1
    assert not (results / "queue.journal").exists() or RunQueue.open(None, results).runs() == {}


def test_queue_refuses_a_changed_plan_once_runs_exist(tmp_path, capsys):
    results = str(tmp_path / "results")
    assert (
        cli(["queue", str(write(tmp_path, "\n[analysis]\nmin_effect_nats = 0.01\n")), "--results", results])
        == 0
    )
    capsys.readouterr()
    assert (
        cli(["queue", str(write(tmp_path, "\n[analysis]\nmin_effect_nats = 0.01\n")), "--results", results])
        == 0
    )
    assert "nothing to add" in capsys.readouterr().out  # unchanged plan: idempotent
    # Changing the plan is refused, also when the re-queue only adds new seeds.
    for seeds in ("[0, 1]", "[0, 1, 2]"):
        rc = cli(
            [
                "queue",
                str(write(tmp_path, "\n[analysis]\nmin_effect_nats = 0.02\n", seeds)),
                "--results",
                results,
            ]
        )
        err = capsys.readouterr().err
        assert rc == 2, err
        assert "analysis.min_effect_nats changed after its runs were queued" in err
        assert "analysis.min_effect_nats: 0.01 != 0.02" in err and "6 run(s) queued" in err
    assert len(RunQueue.open(None, results).runs()) == 6  # nothing added
    rc = cli(["queue", str(write(tmp_path, "")), "--results", results])  # dropping the table is a change too
    assert rc == 2 and "analysis.min_effect_nats: 0.01 != None" in capsys.readouterr().err
