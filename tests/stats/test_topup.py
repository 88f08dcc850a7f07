"""harness topup (DESIGN section 8): which cells are still open, which seeds they get, and the command
on a real journal queue and a real results store (training replaced by a stub that writes designed
final NLLs, so every verdict is known). CPU only, a few seconds:

    python -m pytest -q tests/stats/test_topup.py
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from fstree import unchanged

from harness.cli import main as cli
from harness.design.analysis_plan import AnalysisPlan
from harness.design.factorial import parse_factorial
from harness.report.render.topup_lines import describe
from harness.report.simulation.synthetic import frames_from_values
from harness.report.stats import decisions as dec
from harness.report.stats.analysis import analyze
from harness.report.stats.looks import look_text
from harness.report.stats.topup import CellSeeds, cell_open, plan_topup
from harness.scheduling.grids.plan_seeds import check_plan_seeds
from harness.scheduling.queue.run_queue import RunQueue
from harness.scheduling.workers.loop import work
from harness.store.archive import read_archive, write_archive
from harness.store.store import Store

from queue_stubs import write_grid  # tests/ is on sys.path under pytest (no package)

LOOKS = (3, 5)
EST = [-0.0100, -0.0110, -0.0105]  # treatment - parent: established at the first look (p ~ 4e-4 < 0.0114)
WEAK = [-0.010, -0.004, -0.007]  # one-sided p ~ 0.03: not established at the first look


def _stats(d_tp, d_cp=None, looks=LOOKS, seeds=None):
    parent = [3.5 + 0.01 * i for i in range(len(d_tp))]
    values = {"block_attnres": parent, "rd_attnres": [p + d for p, d in zip(parent, d_tp)]}
    if d_cp is not None:
        values["fixed_v"] = [p + d for p, d in zip(parent, d_cp)]
    f = frames_from_values(values, seeds=seeds)
    return analyze(f["final"], f["runs"], plan=AnalysisPlan(looks=looks))


def _held(seeds, pending=()):
    return {
        ("small", 1_000_000): CellSeeds(
            frozenset(seeds), frozenset(pending), ("block_attnres", "rd_attnres", "fixed_v")
        )
    }


def test_cell_open_truth_table():
    inc, dec_ = dec.V_INCONCLUSIVE, dec.V_DOES_NOT
    assert cell_open(False, False, [dec.V_NOT_ASSESSED]).item()  # headline undecided before its last look
    assert not cell_open(False, True, [dec.V_NOT_ASSESSED]).item()  # not established at the last look: final
    assert cell_open(True, False, [dec_, inc]).item() and cell_open(True, True, [inc]).item()
    assert not cell_open(True, False, [dec_, dec.V_REPRODUCES, dec.V_DEGENERATE]).item()
    codes = np.array([[inc, dec_], [dec_, dec_]])
    assert cell_open(np.array([True, True]), np.array([False, False]), codes).tolist() == [True, False]


def test_a_gain_shown_absent_is_closed():
    """DESIGN 6 v3: topup adds seeds to undecided cells only; 'gain absent' is decided."""
    assert not cell_open(False, False, [dec.V_NOT_ASSESSED], absent=True).item()
    f = frames_from_values(
        {"block_attnres": [3.50, 3.51, 3.52], "rd_attnres": [3.5001, 3.5099, 3.5202]}
    )  # d = +1e-4, -1e-4, +2e-4
    st = analyze(f["final"], f["runs"], plan=AnalysisPlan(looks=LOOKS, min_effect_nats=0.01))
    (h,) = st.headlines
    assert h.absent and h.verdict == "gain absent (< 0.01 nats/token)" and h.absence_holm_p < h.look.level
    (t,) = plan_topup(st, _held({0, 1, 2}))
    assert not t.open and t.new_seeds == ()
    assert "headline gain absent (< 0.01 nats/token): decided, more seeds cannot change it" in describe(t)


def test_established_and_decided_is_closed():
    st = _stats(EST, [0.0001, -0.0001, 0.0])  # the control lands at the parent: does not reproduce
    assert st.assessments[0].verdict == dec.DOES_NOT_REPRODUCE
    (t,) = plan_topup(st, _held({0, 1, 2}))
    assert not t.open and t.new_seeds == ()
    assert describe(t) == (
        "cell small/1_000_000: headline gain established and every control decided: nothing to add"
    )


def test_an_inconclusive_control_gets_seeds_up_to_the_next_look():
    st = _stats(EST, [-0.010, 0.002, -0.004])
    assert st.headlines[0].established and st.assessments[0].verdict == dec.INCONCLUSIVE
    (t,) = plan_topup(st, _held({0, 1, 2}))
    assert t.open and t.next_look == 5 and t.new_seeds == (3, 4)
    line = describe(t)
    assert "headline gain established; inconclusive: fixed_v" in line
    assert "next look 5: queued seed(s) 3 4 for 3 variants (6 runs)" in line
    assert "would queue seed(s) 3 4" in describe(t, dry_run=True)


def test_an_undecided_headline_is_open_and_the_last_look_closes_it():
    (t,) = plan_topup(_stats(WEAK), _held({0, 1, 2}))
    assert t.open and t.new_seeds == (3, 4)
    assert (
        "headline undecided at look 1 of 2 (3 pairs), level 0.0114 (neither established nor absent)"
        in describe(t)
    )
    last = _stats(WEAK + [0.004, -0.003])  # 5 pairs: the last look, still not established
    assert not last.headlines[0].established
    (t,) = plan_topup(last, _held({0, 1, 2, 3, 4}))
    assert not t.open and "the plan's alpha is spent: nothing to add" in describe(t)


def test_an_inconclusive_control_at_the_last_look_gets_nothing():
    st = _stats(EST + [-0.0098, -0.0102], [-0.010, 0.002, -0.004, 0.003, -0.012])
    assert st.headlines[0].established and st.headlines[0].look.last
    assert st.assessments[0].verdict == dec.INCONCLUSIVE
    (t,) = plan_topup(st, _held({0, 1, 2, 3, 4}))
    assert not t.open and describe(t) == (
        "cell small/1_000_000: headline gain established; inconclusive: "
        "fixed_v; past the last look: nothing to add"
    )


def test_before_the_first_look_and_seed_choice():
    (t,) = plan_topup(_stats(WEAK[:2]), _held({0, 1}))
    assert t.open and t.next_look == 3 and t.new_seeds == (2,)
    assert "before the first look (2 pair(s), first look at 3)" in t.reason
    # New seeds are the next integers above every seed the cell used (a failed seed 7 included).
    (t,) = plan_topup(_stats(WEAK), _held({0, 1, 2, 7}))
    assert t.new_seeds == (8, 9)


def test_pending_seeds_count_toward_the_next_look():
    (t,) = plan_topup(_stats(WEAK), _held({0, 1, 2, 3, 4}, pending={3, 4}))
    assert t.open and t.new_seeds == () and t.pending == (3, 4)
    assert describe(t).endswith(
        "next look 5: seed(s) 3 4 already queued (waiting for workers): nothing to add"
    )
    (t,) = plan_topup(_stats(WEAK), _held({0, 1, 2, 3}, pending={3}))
    assert t.new_seeds == (4,) and t.pending == (3,)


def test_a_plan_without_looks_cannot_be_topped_up():
    with pytest.raises(ValueError, match="has no looks"):
        plan_topup(_stats(WEAK, looks=()), _held({0, 1, 2}))


def test_a_degenerate_treatment_is_closed():
    f = frames_from_values({"block_attnres": [3.5, 3.6, 3.7], "rd_attnres": [3.49, 3.58, 3.69]})
    st = analyze(
        f["final"],
        f["runs"],
        plan=AnalysisPlan(looks=LOOKS),
        degenerate={("small", 1_000_000, "rd_attnres"): "w_v never moved"},
    )
    (t,) = plan_topup(st, {})
    assert not t.open and "degenerate (w_v never moved)" in t.reason


FACTORIAL = parse_factorial(
    {
        "factors": ["offset", "decoupled_v"],
        "levels": {
            "block_attnres": [0, 0],
            "param_matched": [1, 0],
            "rd_attnres": [0, 1],
            "rd_offset": [1, 1],
        },
    }
)


def _factorial_stats(n: int, interaction: float, looks=(12, 24)):
    """A factorial study's cell at ``n`` seeds (the second study's design and plan): the treatment gains
    0.03 (established), the offset 0.12 (param_matched reproduces the gain), run noise sd 0.01."""
    rng = np.random.default_rng(3)
    y00 = 3.5 + rng.normal(0, 0.05, n)
    noise = rng.normal(0, 0.01, (3, n))
    values = {
        "block_attnres": y00,
        "param_matched": y00 - 0.12 + noise[0],
        "rd_attnres": y00 - 0.03 + noise[1],
        "rd_offset": y00 - 0.15 + interaction + noise[2],
    }
    f = frames_from_values(
        {v: [float(x) for x in y] for v, y in values.items()},
        roles={"param_matched": "control", "rd_offset": "reference"},
    )
    plan = AnalysisPlan(looks=looks, min_effect_nats=0.02, max_seeds=max(looks), factorial=FACTORIAL)
    return analyze(f["final"], f["runs"], plan=plan)


def _factorial_held(n: int):
    variants = ("block_attnres", "param_matched", "rd_attnres", "rd_offset")
    return {("small", 1_000_000): CellSeeds(frozenset(range(n)), frozenset(), variants)}


def test_an_undecided_factorial_interaction_keeps_a_decided_cell_open_until_its_last_look():
    """The second study at look 1: headline and controls decided, the interaction not: its seeds up to
    look 2 for all four variants. At look 2 (the last) the interaction's alpha is spent: closed."""
    st = _factorial_stats(12, interaction=0.01)
    inter = st.factorial[0].contrast("factorial_interaction")
    assert st.headlines[0].established and st.assessments[0].verdict == dec.REPRODUCES
    assert not inter.established and not inter.look.last
    (t,) = plan_topup(st, _factorial_held(12))
    assert t.open and t.next_look == 24 and t.new_seeds == tuple(range(12, 24))
    assert len(t.variants) == 4
    assert t.reason == (
        "headline gain established and every control decided, but the factorial interaction not "
        f"established at {look_text(inter.look)}"
    )
    last = _factorial_stats(24, interaction=0.01)
    assert last.factorial[0].contrast("factorial_interaction").look.last
    (t,) = plan_topup(last, _factorial_held(24))
    assert not t.open and t.new_seeds == ()


def test_an_established_factorial_interaction_closes_the_cell():
    st = _factorial_stats(12, interaction=0.08)
    assert st.factorial[0].contrast("factorial_interaction").established
    (t,) = plan_topup(st, _factorial_held(12))
    assert not t.open and t.reason == "headline gain established and every control decided"


# --------------------------------------------------------------------------- the command, end to end

# The queue tests' grid (tiny, 1024 tokens, parent, treatment, fixed_v) plus the A/A check and a plan.
EXTRA = 'dup_route_tied = "control"\n[analysis]\nmin_effect_nats = 0.01\n{looks}\n'

# Designed final NLLs: parent 3.5 + 0.01 seed; treatment - parent per seed; fixed_v - parent per seed.
D_TP = {0: -0.010, 1: -0.004, 2: -0.007, 3: -0.009, 4: -0.006}
D_CP = {0: -0.001, 1: 0.002, 2: 0.000, 3: -0.002, 4: 0.001}


def stub_result(run_config, results_dir: Path) -> tuple[str, float]:
    """Write the designed result file of one run (real harness.store.store.Store) instead of training."""
    config = run_config.to_dict()
    seed, variant = config["seed"], config["variant"]
    nll = 3.5 + 0.01 * seed + {"rd_attnres": D_TP[seed], "fixed_v": D_CP[seed]}.get(variant, 0.0)
    run = {k: config[k] for k in ("run_id", "grid", "variant", "role", "seed", "size", "budget_tokens")}
    Store(results_dir).write_result(
        {
            "run": {
                **run,
                "status": "done",
                "protocol_hash": "p0",
                "config": config,
                "wall_s": 2.0,
                "tokens_seen": 1000,
            },
            "metrics": [{"step": 1, "tokens": 1000, "split": "val", "name": "nll", "value": nll}],
        }
    )
    return "done", nll


def _drain(results: Path) -> None:
    work(RunQueue.open(None, results), stub_result, results, log=lambda m: None)


def _seeds(results: Path) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for r in RunQueue.open(None, results).runs("seq").values():
        out.setdefault(r.config.variant, []).append(r.config.seed)
    return {v: sorted(s) for v, s in out.items()}


def _queued_and_trained(tmp_path: Path, looks: str) -> Path:
    """The grid queued on a journal queue and its 3 seeds trained by the stub; the results folder."""
    grid = write_grid(tmp_path, seeds="[0, 1, 2]", name="seq", extra=EXTRA.format(looks=looks))
    results = tmp_path / "results"
    assert cli(["queue", str(grid), "--results", str(results)]) == 0
    _drain(results)
    return results


def test_topup_command_adds_seeds_only_where_they_can_decide(tmp_path, capsys):
    results = _queued_and_trained(tmp_path, "looks = [3, 5]")
    capsys.readouterr()

    assert cli(["topup", "--grid", "seq", "--results", str(results), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "cell tiny/1_024: headline undecided at look 1 of 2 (3 pairs), level 0.0114" in out
    assert "would queue seed(s) 3 4 for 4 variants (8 runs)" in out
    assert _seeds(results)["rd_attnres"] == [0, 1, 2]  # a dry run queues nothing

    assert cli(["topup", "--grid", "seq", "--results", str(results)]) == 0
    out = capsys.readouterr().out
    assert "queued seed(s) 3 4 for 4 variants (8 runs)" in out and "queued 8 runs in" in out
    assert _seeds(results) == {
        v: [0, 1, 2, 3, 4] for v in ("block_attnres", "rd_attnres", "fixed_v", "dup_route_tied")
    }
    new = next(
        r.config.to_dict()
        for r in RunQueue.open(None, results).runs("seq").values()
        if r.config.seed == 4 and r.config.variant == "fixed_v"
    )
    old = next(
        r.config.to_dict()
        for r in RunQueue.open(None, results).runs("seq").values()
        if r.config.seed == 0 and r.config.variant == "fixed_v"
    )
    assert new["run_id"] == "seq:tiny:fixed_v:s4:1024" and {**old, "seed": 4, "run_id": new["run_id"]} == new

    assert cli(["topup", "--grid", "seq", "--results", str(results)]) == 0  # idempotent: waiting for workers
    out = capsys.readouterr().out
    assert "seed(s) 3 4 already queued (waiting for workers): nothing to add" in out
    assert len(RunQueue.open(None, results).runs("seq")) == 20

    _drain(results)
    assert cli(["topup", "--grid", "seq", "--results", str(results)]) == 0
    out = capsys.readouterr().out
    # 5 pairs: the last look. The gain is established there (one-sided p 0.0013 < 0.0386) and fixed_v,
    # near the parent at every seed (e = 0.0025 .. 0.004), does not reproduce it.
    assert "cell tiny/1_024: headline gain established and every control decided: nothing to add" in out
    assert out.splitlines()[-1] == (
        "the last look (5) has passed and alpha is spent; more seeds need a new plan (`harness followup`)"
    )
    assert len(RunQueue.open(None, results).runs("seq")) == 20
    assert (
        cli(
            [
                "report",
                "--grid",
                "seq",
                "--results",
                str(results),
                "--out",
                str(tmp_path / "r"),
                "--no-figures",
            ]
        )
        == 0
    )
    md = (tmp_path / "r" / "report.md").read_text()
    assert "look 2 of 2 (5 pairs), level 0.0386" in md
    assert "| fixed_v | tiny, 1.024k | **does not reproduce gain** |" in md


def test_topup_command_errors_are_one_line(tmp_path, capsys):
    results = _queued_and_trained(tmp_path, "")
    capsys.readouterr()
    assert cli(["topup", "--grid", "seq", "--results", str(results)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "its analysis plan has no looks" in err and "looks = [3, 5, 10]" in err
    assert cli(["topup", "--grid", "nope", "--results", str(results)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "no runs of grid 'nope' in the results store; grids there: seq" in err
    assert cli(["topup", "--grid", "seq", "--results", str(tmp_path / "missing")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_queue_after_the_alpha_is_spent_refuses_seeds_past_max_seeds_and_notes_seeds_past_the_last_look(
    tmp_path, capsys
):
    """Issue 61: once topup says the plan's alpha is spent, `harness queue` of the grid with more seeds
    queues seeds past the last look with one line saying they enter no test (the report tests the first
    looks[-1] pairs only), and refuses a cell past max_seeds in one line, nothing written; so does `harness
    import` of an archive whose queue holds more seeds than its plan allows, and a new grid whose own seeds
    exceed it."""
    extra = EXTRA.format(looks="looks = [3, 5]\nmax_seeds = 6")
    results = _queued_and_trained(tmp_path, "looks = [3, 5]\nmax_seeds = 6")
    assert cli(["topup", "--grid", "seq", "--results", str(results)]) == 0
    _drain(results)
    assert cli(["topup", "--grid", "seq", "--results", str(results)]) == 0
    assert "alpha is spent" in capsys.readouterr().out.splitlines()[-1]
    corpus = tmp_path / "corpus.jsonl"

    grid = write_grid(tmp_path, seeds="[0, 1, 2, 3, 4, 5]", name="seq", extra=extra, corpus=corpus)
    assert cli(["queue", str(grid), "--results", str(results)]) == 0
    out = capsys.readouterr().out
    assert "queued 4 runs" in out and out.splitlines()[-1] == (
        "note: grid seq, cell tiny/1_024: seed(s) 5 lie past the plan's last look (5 seeds), where its alpha "
        "is spent: they enter no test, only the descriptives (seeds that count need a new plan, in a grid "
        "with a new `name`)"
    )
    assert cli(["queue", str(grid), "--results", str(results)]) == 0  # nothing new: nothing to note
    assert "note:" not in capsys.readouterr().out

    grid = write_grid(tmp_path, seeds=str(list(range(8))), name="seq", extra=extra, corpus=corpus)
    with unchanged(tmp_path):
        assert cli(["queue", str(grid), "--results", str(results)]) == 2
    err = capsys.readouterr().err
    assert (
        err.count("\n") == 1
        and (
            "grid seq: cell tiny/1_024 would hold 8 seeds (6 queued, new: 6 7), more than its analysis plan's "
            "max_seeds 6, the most seeds a cell may get, fixed before the runs: more seeds need a new plan, in a "
            "grid with a new `name`"
        )
        in err
    ), err
    assert _seeds(results)["rd_attnres"] == [0, 1, 2, 3, 4, 5]

    # a new grid whose own seeds exceed its plan: refused before its results folder exists
    wide = write_grid(tmp_path, seeds=str(list(range(7))), name="wide", extra=extra, corpus=corpus)
    with unchanged(tmp_path):
        assert cli(["queue", str(wide), "--results", str(tmp_path / "wide_results")]) == 2
    assert "cell tiny/1_024 would hold 7 seeds (0 queued, new: 0-6)" in capsys.readouterr().err

    # an archive whose queue holds more seeds than its plan allows (written by code that let it): refused
    archive = tmp_path / "seq.tar.gz"
    assert cli(["archive", "--grid", "seq", "--results", str(results), "--out", str(archive)]) == 0
    a = read_archive(archive)
    queue = [
        {**r, "config": {**r["config"], "analysis": {**r["config"]["analysis"], "max_seeds": 5}}}
        for r in a.queue
    ]
    write_archive(archive, grid="seq", results=a.results, queue=queue, code=a.archived_by, corpus=a.corpus)
    assert {json.dumps(r["config"]["analysis"]["max_seeds"]) for r in read_archive(archive).queue} == {"5"}
    with unchanged(tmp_path):
        assert cli(["import", str(archive), "--results", str(tmp_path / "imported")]) == 2
    err = capsys.readouterr().err
    assert (
        err.count("\n") == 1
        and "grid seq: cell tiny/1_024 would hold 6 seeds" in err
        and "max_seeds 5" in err
    )


def test_plan_seeds_counts_every_seed_of_a_cell_and_notes_only_new_seeds_past_the_last_look():
    plan = {"max_seeds": 10, "looks": [3, 5]}
    held = [("tiny", 1024, s) for s in (0, 1, 2, 3, 4, 5)]  # seed 5 past the last look already
    assert check_plan_seeds("g", plan, held, held) == []  # nothing new: nothing said
    (note,) = check_plan_seeds("g", plan, held, [("tiny", 1024, s) for s in (6, 7, 8, 10)])
    assert "cell tiny/1_024: seed(s) 6-8 10 lie past the plan's last look (5 seeds)" in note
    other = [
        ("tiny", 2048, s) for s in range(10)
    ]  # another budget is another cell: 10 seeds each are allowed
    assert len(check_plan_seeds("g", plan, held, [*other, ("tiny", 1024, 9)])) == 2
    assert check_plan_seeds("g", {"max_seeds": 10, "looks": []}, held, [("tiny", 1024, 9)]) == []  # no looks
    with pytest.raises(ValueError, match=r"cell tiny/1_024 would hold 11 seeds \(6 queued, new: 6-10\)"):
        check_plan_seeds("g", plan, held, [("tiny", 1024, s) for s in range(11)])
    with pytest.raises(ValueError, match="max_seeds 30"):  # the default plan
        check_plan_seeds("g", {}, [], [("small", 1, s) for s in range(31)])


# --------------------------------------------------------------------------- a grid with [axes]

AXES_GRID = """\
name = "ax"
corpus = "{corpus}"
sizes = ["tiny"]
seeds = [0, 1, 2]
budgets_tokens = [1024]
[variants]
block_attnres = "parent"
rd_attnres = "treatment"
[axes]
lr = [0.001, 0.004]
[train]
batch_tokens = 512
[analysis]
min_effect_nats = 0.01
looks = [3, 5]
"""
# treatment - parent per seed: established at the first look at lr 0.001, undecided at lr 0.004
D_BY_LR = {0.001: EST, 0.004: WEAK}


def stub_axis_result(run_config, results_dir: Path) -> tuple[str, float]:
    """The designed result of one run of the axis grid: its gain depends on its cell's lr."""
    config = run_config.to_dict()
    seed = config["seed"]
    d = D_BY_LR[config["axes"]["lr"]][seed] if config["variant"] == "rd_attnres" and seed < 3 else 0.0
    nll = 3.5 + 0.01 * seed + d
    run = {k: config[k] for k in ("run_id", "grid", "variant", "role", "seed", "size", "budget_tokens")}
    Store(results_dir).write_result(
        {
            "run": {**run, "status": "done", "protocol_hash": "p0", "config": config, "wall_s": 2.0},
            "metrics": [{"step": 1, "tokens": 1000, "split": "val", "name": "nll", "value": nll}],
        }
    )
    return "done", nll


def test_topup_of_an_axis_grid_adds_seeds_to_its_undecided_cell_only(tmp_path, capsys):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"text": "hello"}\n')  # the stub trains nothing: queue only checks it is there
    grid = tmp_path / "ax.toml"
    grid.write_text(AXES_GRID.format(corpus=corpus))
    results = tmp_path / "results"
    assert cli(["queue", str(grid), "--results", str(results)]) == 0
    work(RunQueue.open(None, results), stub_axis_result, results, log=lambda m: None)
    capsys.readouterr()
    assert cli(["topup", "--grid", "ax", "--results", str(results)]) == 0
    out = capsys.readouterr().out
    assert "queued 4 runs in" in out, out
    ids = set(RunQueue.open(None, results).runs("ax"))
    new = {r for r in ids if ":s3:" in r or ":s4:" in r}
    assert new == {f"ax:tiny:{v}:s{s}:1024:lr=0.004" for v in ("block_attnres", "rd_attnres") for s in (3, 4)}
    cfg = RunQueue.open(None, results).runs("ax")["ax:tiny:rd_attnres:s4:1024:lr=0.004"].config
    assert cfg.axes == {"lr": 0.004} and cfg.train["lr"] == 0.004
