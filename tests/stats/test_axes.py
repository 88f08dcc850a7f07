"""Gain across an axis (harness.report.stats.axes, DESIGN section 1.2): per-value points, the descriptive trend and
where the verdict holds, on a real analysis of designed NLLs in three lr cells. CPU, seconds."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from harness.design.analysis_plan import AnalysisPlan
from harness.report.render.axis_section import verdict_line
from harness.report.simulation.synthetic import frames_from_values
from harness.report.stats.analysis import analyze
from harness.report.stats.axes import EVERY, NONE, SOME, across_axes
from harness.report.stats.pairing import cell_name, cell_order, cell_size, split_cell_size

# treatment - parent per seed at each lr: a clear gain at the two small values, none at the largest
D = {
    0.001: [-0.020, -0.022, -0.021, -0.019],
    0.002: [-0.010, -0.012, -0.011, -0.009],
    0.004: [0.001, -0.001, 0.002, 0.000],
}


def _stats(d_by_lr):
    finals, runs = [], []
    for lr, d in d_by_lr.items():
        parent = [3.5 + 0.01 * i for i in range(len(d))]
        f = frames_from_values(
            {"block_attnres": parent, "rd_attnres": [p + x for p, x in zip(parent, d)]},
            size=cell_size("tiny", {"lr": lr}),
            budget_tokens=4096,
        )
        tag = pl.col("run_id") + f":lr={lr}"
        finals.append(f["final"].with_columns(tag))
        runs.append(f["runs"].with_columns(tag))
    return analyze(pl.concat(finals), pl.concat(runs), plan=AnalysisPlan())


def test_each_lr_is_a_cell_in_one_holm_family_and_the_line_across_it_says_where_the_gain_holds():
    stats = _stats(D)
    assert [s for s, _ in stats.cells] == ["tiny@lr=0.001", "tiny@lr=0.002", "tiny@lr=0.004"]
    assert all(h.n_cells == 3 for h in stats.headlines)
    (line,) = across_axes(stats.headlines, stats.comparisons)
    assert (line.axis, line.preset, line.budget_tokens, line.fixed) == ("lr", "tiny", 4096, ())
    assert [p.value for p in line.points] == ["0.001", "0.002", "0.004"]
    means = [np.mean(D[lr]) for lr in (0.001, 0.002, 0.004)]
    assert [p.mean for p in line.points] == pytest.approx(means, abs=1e-12)
    assert line.slope == pytest.approx(np.polyfit(np.log2([0.001, 0.002, 0.004]), means, 1)[0], abs=1e-12)
    verdicts = {h.size: h.established for h in stats.headlines}
    assert verdicts == {"tiny@lr=0.001": True, "tiny@lr=0.002": True, "tiny@lr=0.004": False}
    assert line.held_at == ("0.001", "0.002") and line.holds == SOME
    assert verdict_line(line) == "The gain is established at some values of lr: 0.001, 0.002; not at 0.004."


def test_every_and_none():
    (every,) = across_axes(*_parts(_stats({0.001: D[0.001], 0.002: D[0.002]})))
    assert every.holds == EVERY and verdict_line(every).endswith("at every value of lr (0.001, 0.002).")
    (none,) = across_axes(*_parts(_stats({0.004: D[0.004], 0.008: D[0.004]})))
    assert none.holds == NONE and verdict_line(none).endswith("at none of the values of lr (0.004, 0.008).")


def _parts(stats):
    return stats.headlines, stats.comparisons


def test_a_cell_is_named_and_ordered_by_its_values():
    assert cell_name("tiny@lr=0.001", "4_096") == "Size tiny, budget 4_096 tokens, lr 0.001"
    assert cell_name("tiny", "4_096") == "Size tiny, budget 4_096 tokens"
    assert split_cell_size(cell_size("small", {"schedule": "wsd", "lr": 4e-05})) == (
        "small",
        (("schedule", "wsd"), ("lr", "4e-05")),
    )
    cells = [("small", 10), ("tiny@lr=0.01", 10), ("tiny@lr=0.002", 10), ("tiny@lr=0.002", 5)]
    assert sorted(cells, key=cell_order) == [
        ("tiny@lr=0.002", 5),
        ("tiny@lr=0.002", 10),
        ("tiny@lr=0.01", 10),
        ("small", 10),
    ]
