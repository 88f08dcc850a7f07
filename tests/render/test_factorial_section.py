"""The report's factorial section next to steps 1 and 2 (issue 47): the one line where step 1 and the
factorial table judge the headline's pair differently, and the gain fraction step 2 gives for a simple
effect's pair, shown in the factorial table."""

from __future__ import annotations

import numpy as np
import pytest
from test_factorial_stats import draws, study  # tests/ is on sys.path under pytest (no package)

from harness.report.render.blocks import Para, Table
from harness.report.render.factorial_section import blocks, judged_apart
from harness.report.render.sentences import fraction_text
from harness.report.stats.factorial import SIMPLE


def _table(stats) -> Table:
    return next(b for b in blocks(stats, []) if isinstance(b, Table))


def test_the_section_says_in_one_line_why_step_1_and_the_table_judge_the_pair_differently():
    y = draws(12, 0.03, 0, sd=0.03)  # decoupled_v at offset 0: one-sided Holm p 0.02, two-sided Holm p 0.12
    stats, _ = study(y, min_effect_nats=0.02)
    cell = stats.factorial[0]
    h, c = stats.headlines[0], cell.contrast(SIMPLE, 1, 0)  # rd_attnres - block_attnres
    assert c.comparison.comparison.endswith("rd_attnres - block_attnres")
    assert h.established and not c.established and h.holm_p < 0.05 <= c.holm_p
    line = judged_apart(stats, cell)
    assert line == (
        f"rd_attnres - block_attnres is 'gain established' in step 1 (Holm p {h.holm_p:.3g}) and "
        f"'not established' here (Holm p {c.holm_p:.3g}): both are right. Step 1 asks one question, one-sided "
        "(is the treatment better?), in its own family over the cells; here the same pair is one of 5 two-sided "
        "tests under Holm (does the factor change the NLL either way?), so it needs a smaller p."
    )
    assert "\n" not in line and any(isinstance(b, Para) and b.text == line for b in blocks(stats, []))


def test_no_such_line_where_they_agree():
    stats, _ = study(draws(12, 0.0, 3, sd=0.002), min_effect_nats=0.02)  # decoupled_v clear at sd 0.002
    cell = stats.factorial[0]
    assert stats.headlines[0].established and cell.contrast(SIMPLE, 1, 0).established
    assert judged_apart(stats, cell) is None


def test_a_simple_effect_of_a_control_against_the_parent_shows_step_2s_gain_fraction():
    y = draws(12, 0.03, 0, sd=0.03)
    stats, _ = study(y, min_effect_nats=0.02)
    table = _table(stats)
    assert table.columns[-1] == "gain fraction f (step 2)"
    col = {row[0]: row[-1] for row in table.rows}
    a = stats.assessment("param_matched", "small", 1_000_000)
    # f = mean(param_matched - block_attnres) / mean(rd_attnres - block_attnres): columns (y00, y10, y01, y11)
    assert a.fraction == pytest.approx(np.mean(y[:, 1] - y[:, 0]) / np.mean(y[:, 2] - y[:, 0]), rel=1e-12)
    assert (
        col["offset at decoupled_v=0: param_matched - block_attnres"]
        == fraction_text(a)
        == "+2.14\n[+1.19, +32.11]"
    )
    assert col["decoupled_v at offset=0: rd_attnres - block_attnres"] == "1 (the gain, step 1)"
    assert col["offset at decoupled_v=1: rd_offset - rd_attnres"] == "-"  # step 2 has no such pair
    assert col["decoupled_v at offset=1: rd_offset - param_matched"] == "-"
