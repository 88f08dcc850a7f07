"""Issue 38 item 6, stale words: what `harness report --help`, the methods text and stats.csv say
must match DESIGN 6 as implemented (divergence imputed, degenerate within the floor, A/A `pass`,
"lost" meaning diverged only)."""

from __future__ import annotations

import polars as pl
import pytest

from harness import cli
from harness.report.render.sections import render_markdown
from harness.report.simulation.synthetic import frames_from_values
from harness.report.stats.analysis import analyze

VALUES = {
    "block_attnres": [3.90, 3.95, 3.92, 3.97, 3.91],
    "rd_attnres": [3.87, 3.93, 3.88, 3.95, 3.89],
    "fixed_v": [3.89, 3.94, 3.90, 3.96, 3.90],
}


def test_report_help_says_what_the_report_does(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["report", "--help"])
    text = capsys.readouterr().out
    assert exit_.value.code == 0
    assert "Holm over controls" not in text and "never averaged in" not in text
    assert "loss for that side (worst-case imputation), never as a dropped pair" in text


def test_methods_text_and_notes_use_the_current_words():
    frames = frames_from_values(VALUES)
    gone = pl.col("run_id") == "rd_attnres-s2"  # a run that never started: no row anywhere
    stats = analyze(frames["final"].filter(~gone), frames["runs"].filter(~gone))
    md = render_markdown(stats, [])
    assert "never averaged in" not in md and "exactly zero at every seed" not in md
    assert (
        "paired differences with the parent within the numerical floor (1e-06 nats/token) at every seed" in md
    )
    assert "a run that failed for another reason or never ran leaves its seed unpaired" in md
    row = stats.to_frame().filter(pl.col("comparison") == "rd_attnres - block_attnres").row(0, named=True)
    assert "unpaired seeds 2 (why: missing_seeds)" in row["note"] and "lost seeds" not in row["note"]
    assert "unpaired seed(s) 2: seed 2 (rd_attnres: no run)" in md
