"""Edges, round 3 (issue 45, rows 11 and 14-17): what the report, `followup`, grid/spec files
with a byte-order mark and `prepare`'s refusals say and leave behind.

Real store (db.store.Store) over synthetic runs (reports.synthetic), real CLI commands; CPU only:

    python -m pytest -q tests/test_edges_reports.py
"""

from __future__ import annotations

import polars as pl
from test_report import write_results

from db.store import Store
from harness.cli import main as cli
from reports.synthetic import synthetic_frames


def test_report_md_and_html_say_above_the_plateau_with_a_positive_distance(tmp_path, capsys):
    """Row 17: every run ends above its plateau (the worst one 0.614 above): the table, the warning
    and the HTML say "0.614 above", as the terminal does, never "-0.614" or "Near the plateau"."""
    results = tmp_path / "results"
    frames = synthetic_frames(grid="g", seeds=(0, 1, 2), n_layers=2, n_evals=2)
    worst = frames["final"].group_by("size", "budget_tokens").agg(pl.col("val_nll").max())
    assert worst.height == 1  # one cell: one plateau below all of its runs
    plateau = worst["val_nll"][0] - 0.614
    edit = {rid: {"unigram_nll": plateau} for rid in frames["runs"]["run_id"]}
    write_results(Store(results), frames, edit=edit)
    assert cli(["report", "--grid", "g", "--results", str(results), "--no-figures"]) == 0
    assert "the worst run ends 0.614 above it" in capsys.readouterr().out
    md = (results / "reports" / "g" / "report.md").read_text()
    html = (results / "reports" / "g" / "report.html").read_text()
    for text in (md, html):
        assert "0.614 above" in text
        assert "Above the plateau (the worst run ends above it): small, 1M" in text
        assert "-0.614" not in text
        assert "Near the plateau" not in text
        assert "worst run below the plateau" not in text
