"""Degenerate controls (DESIGN section 3 and 6): each criterion fires exactly at its
boundary, the A/A check is exempt, and the verdict `invalid: degenerate` replaces every
other verdict in the report. The frames are hand-made so every number is known; the
end-to-end version with real training is in tests/e2e/test_queue_work_report.py."""

from __future__ import annotations

import csv

import polars as pl
import pytest

from harness.report.build import Frames, build_report
from harness.report.simulation.synthetic import frames_from_values
from harness.report.stats.analysis import analyze
from harness.report.stats.decisions import DEGENERATE
from harness.report.stats.degeneracy import IDENTICAL_TOL, find_degenerate

SEEDS = [0, 1, 2, 3, 4]
PARENT = [3.60, 3.62, 3.58, 3.61, 3.59]
TREAT = [p - 0.03 + e for p, e in zip(PARENT, [0.001, -0.001, 0.0005, 0.0, -0.0005])]
LAYERS = range(4)
CELL = ("small", 1_000_000)


def frames(**controls: list[float]) -> dict[str, pl.DataFrame]:
    return frames_from_values({"block_attnres": PARENT, "rd_attnres": TREAT, **controls}, seeds=SEEDS)


def pair_rows(
    variant: str, diffs, *, tokens=(1_000_000,), route_b: str = "dup", seeds=SEEDS, offset: float = 0.0
) -> list[dict]:
    """route_pairs rows (qk vs route_b, attn site) with ``diffs[layer]`` at every evaluation."""
    return [
        dict(
            run_id=f"{variant}-s{s}",
            tokens=t,
            layer=l,
            site="attn",
            route_a="qk",
            route_b=route_b,
            query_max_abs_diff=float(diffs[l]),
            offset_max_abs_diff=offset,
            js=0.0,
        )
        for s in seeds
        for t in tokens
        for l in LAYERS
    ]


def param_rows(
    variant: str, names: dict[str, float], *, seeds=SEEDS, tokens=(500_000, 1_000_000)
) -> list[dict]:
    """route_params rows: every routing parameter name at every layer with max |change| ``names[name]``."""
    return [
        dict(
            run_id=f"{variant}-s{s}",
            tokens=t,
            layer=l,
            site="attn",
            name=n,
            numel=64,
            max_abs_change=float(c),
            max_abs_value=float(c),
        )
        for s in seeds
        for t in tokens
        for l in LAYERS
        for n, c in names.items()
    ]


def find(f, pairs=(), params=()) -> dict:
    return find_degenerate(
        f["final"],
        f["runs"],
        pl.DataFrame(list(pairs)) if pairs else None,
        pl.DataFrame(list(params)) if params else None,
    )


def moved_parent() -> list[dict]:
    return param_rows("block_attnres", {"w_qk": 0.01})


NOISY = [p + e for p, e in zip(PARENT, [0.002, -0.001, 0.001, -0.002, 0.0005])]


# -- criterion 1: identical routes -----------------------------------------------------------------


def test_two_routes_identical_at_every_site_make_a_control_degenerate():
    out = find(frames(sym=NOISY), pair_rows("sym", [0, 0, 0, 0]))
    assert list(out) == [(*CELL, "sym")]
    reason = out[(*CELL, "sym")]
    assert "routes qk and dup stayed identical at every attn site" in reason
    assert "max |summed-query difference| = 0" in reason and "5 run(s)" in reason


@pytest.mark.parametrize(
    "diffs, offset, degenerate",
    [
        ([0, 0, 0, 0.5 * IDENTICAL_TOL], 0.0, True),  # within the tolerance
        ([0, 0, 0, 2 * IDENTICAL_TOL], 0.0, False),  # one site apart is enough
        ([0, 1e-3, 1e-3, 1e-3], 0.0, False),  # layer 0 (one source) never moves: no sign either way
        ([0, 0, 0, 0], 1e-3, False),  # same queries, different offsets: two different routes
    ],
)
def test_identical_routes_boundary(diffs, offset, degenerate):
    out = find(frames(c=NOISY), pair_rows("c", diffs, offset=offset))
    assert bool(out) == degenerate, out


def test_identical_routes_are_judged_after_training_in_every_run():
    # identical at the first evaluation, apart at the last: not degenerate
    early = pair_rows("c", [0, 0, 0, 0], tokens=(500_000,))
    late = pair_rows("c", [0, 1e-3, 1e-3, 1e-3], tokens=(1_000_000,))
    assert find(frames(c=NOISY), early + late) == {}
    # apart early, identical at the end: degenerate
    early = pair_rows("c", [0, 1e-3, 1e-3, 1e-3], tokens=(500_000,))
    late = pair_rows("c", [0, 0, 0, 0], tokens=(1_000_000,))
    assert find(frames(c=NOISY), early + late)
    # identical in four runs, apart in one: not degenerate
    rows = pair_rows("c", [0, 0, 0, 0], seeds=SEEDS[:4]) + pair_rows("c", [0, 0, 1e-3, 0], seeds=SEEDS[4:])
    assert find(frames(c=NOISY), rows) == {}


def test_the_treatment_and_references_are_never_judged():
    rows = pair_rows("rd_attnres", [0, 0, 0, 0], route_b="v")
    assert find(frames(), rows) == {}


# -- criterion 2: nothing it adds moved ------------------------------------------------------------


def test_a_control_whose_added_parameters_never_moved_is_degenerate():
    params = moved_parent() + param_rows("c", {"w_qk": 0.01, "w_x": 0.0})
    out = find(frames(c=NOISY), params=params)
    assert "none of the 4 parameter(s) it adds (w_x) ever moved from initialisation" in out[(*CELL, "c")]


def test_any_added_parameter_moving_anywhere_clears_the_control():
    rows = moved_parent() + param_rows("c", {"w_qk": 0.01, "w_x": 0.0})
    for r in rows:  # one layer of one run moved, at one evaluation only
        if r["run_id"] == "c-s3" and r["name"] == "w_x" and r["layer"] == 2 and r["tokens"] == 500_000:
            r["max_abs_change"] = 1e-7
    assert find(frames(c=NOISY), params=rows) == {}


def test_a_control_adding_no_trainable_parameter_is_not_judged_by_that_rule():
    # fixed_v: its w_v is a frozen buffer, so its route_params rows are the parent's names
    params = moved_parent() + param_rows("fixed_v", {"w_qk": 0.01})
    pairs = pair_rows("fixed_v", [0, 0.02, 0.03, 0.02], route_b="v")
    assert find(frames(fixed_v=NOISY), pairs, params) == {}


def test_one_route_with_two_equal_queries_is_not_degenerate():
    # query_reparam: w_qk == w_extra by design, but they form ONE route (no route_pairs rows)
    params = moved_parent() + param_rows("query_reparam", {"w_qk": 0.02, "w_extra": 0.02})
    assert find(frames(query_reparam=NOISY), (), params) == {}


# -- criterion 3: no paired difference ---------------------------------------------------------------


def test_zero_paired_differences_at_every_seed_are_degenerate_and_one_nonzero_is_not():
    out = find(frames(copy=list(PARENT)))
    assert out == {
        (*CELL, "copy"): "its paired differences with the parent are exactly 0 at every seed (5 pair(s))"
    }
    almost = list(PARENT)
    almost[2] += 1e-12
    assert find(frames(copy=almost)) == {}


def test_the_aa_check_is_exempt():
    pairs = pair_rows("dup_route_tied", [0, 0, 0, 0], route_b="qk_dup")
    assert find(frames(dup_route_tied=list(PARENT)), pairs) == {}


def test_criteria_are_all_named():
    params = moved_parent() + param_rows("c", {"w_qk": 0.01, "w_dup": 0.0})
    reason = find(frames(c=list(PARENT)), pair_rows("c", [0, 0, 0, 0]), params)[(*CELL, "c")]
    assert (
        reason.count("; ") == 2 and "identical" in reason and "ever moved" in reason and "exactly 0" in reason
    )


# -- the verdict -----------------------------------------------------------------------------------


def test_degenerate_takes_precedence_over_every_verdict():
    # "good" lands on the treatment (reproduces gain), "sym" equals it too but its routes are one
    f = frames(good=TREAT, sym=TREAT, tiny=TREAT[:1])
    pairs = pair_rows("sym", [0, 0, 0, 0]) + pair_rows("tiny", [0, 0, 0, 0], seeds=[0])
    before = {a.control: a for a in analyze(f["final"], f["runs"]).assessments}
    assert before["sym"].verdict == before["good"].verdict == "reproduces gain"
    assert before["tiny"].verdict != DEGENERATE  # one pair: no statistical verdict at all
    marked = analyze(f["final"], f["runs"], degenerate=find(f, pairs))
    after = {a.control: a for a in marked.assessments}
    for v in ("sym", "tiny"):
        assert after[v].verdict == DEGENERATE
        assert "routes qk and dup stayed identical" in after[v].degenerate_reason
    assert after["good"].verdict == "reproduces gain"
    rows = {r["comparison"]: r for r in marked.to_frame().to_dicts()}
    assert rows["sym - block_attnres"]["verdict"] == DEGENERATE
    assert "routes qk and dup stayed identical" in rows["sym - block_attnres"]["note"]
    # the descriptives of the degenerate control's comparison stay
    before_rows = {r["comparison"]: r for r in analyze(f["final"], f["runs"]).to_frame().to_dicts()}
    for col in ("n_pairs", "mean_diff", "ci_low", "ci_high", "sd", "wins", "perm_p"):
        assert rows["sym - block_attnres"][col] == before_rows["sym - block_attnres"][col], col


def test_report_files_say_invalid_degenerate(tmp_path):
    f = frames(sym=NOISY, good=TREAT)
    out = build_report(
        Frames(f["final"], f["runs"], route_pairs=pl.DataFrame(pair_rows("sym", [0, 0, 0, 0]))),
        tmp_path,
        figures=False,
    )
    with open(tmp_path / "stats.csv") as fh:
        rows = {r["comparison"]: r for r in csv.DictReader(fh)}
    assert rows["sym - block_attnres"]["verdict"] == DEGENERATE
    assert "identical at every attn site" in rows["sym - block_attnres"]["note"]
    assert rows["good - block_attnres"]["verdict"] != DEGENERATE
    assert DEGENERATE in (tmp_path / "report.md").read_text()
    assert out.stats.assessments
