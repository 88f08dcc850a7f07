"""Edges, round 3 (issue 45, rows 11 and 14-17): what the report, `followup`, grid/spec files
with a byte-order mark and `prepare`'s refusals say and leave behind.

Real store (harness.store.store.Store) over synthetic runs (harness.report.simulation.synthetic), real CLI commands; CPU only:

    python -m pytest -q tests/report/test_report_bad_input.py
"""

from __future__ import annotations

import os
import subprocess
import sys

import polars as pl
import pytest
from test_report import write_results

from harness.cli import main as cli
from harness.report.simulation.synthetic import synthetic_frames
from harness.store.store import Store


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


BOM = b"\xef\xbb\xbf"  # UTF-8 byte-order mark, as Windows editors write it


@pytest.mark.slow
def test_a_grid_and_a_spec_file_starting_with_a_byte_order_mark_are_read(tmp_path):
    """Row 15: the BOM is dropped, not called invalid TOML: `harness plan` (a real process) reads a
    grid file and a user's composed spec file (on $HARNESS_SPEC_PATH) that both start with one."""
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "my_dup.toml").write_bytes(BOM + b'name = "my_dup"\nbase = "rd_attnres"\nrole = "control"\n')
    grid = tmp_path / "grid.toml"
    grid.write_bytes(
        BOM + b'name = "g"\ncorpus = "c.jsonl"\nsizes = ["tiny"]\nseeds = [0, 1]\nbudgets_tokens = [1000]\n'
        b'[variants]\nblock_attnres = "parent"\nrd_attnres = "treatment"\nmy_dup = "control"\n'
    )
    argv = [
        sys.executable,
        "-m",
        "harness",
        "plan",
        "--sd",
        "0.05",
        "--results",
        str(tmp_path / "r"),
        str(grid),
    ]
    env = {**os.environ, "HARNESS_SPEC_PATH": str(specs)}
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "my_dup (contrast)           tiny   1_000  0.0500" in done.stdout, done.stdout
    assert done.stderr == ""


@pytest.mark.slow
def test_followup_of_a_cell_whose_gain_is_absent_says_so_on_screen(tmp_path, capsys):
    """Row 14: the treatment does as well as the parent (headline 'gain absent (< 0.02 nats/token)'):
    besides 'wrote ...', one line says the gain is not established there and what the follow-up tests."""
    from test_followup import PARENT, RNG, VALUES, followup, write_store

    values = {**VALUES, "rd_attnres": list(PARENT + RNG.normal(0, 0.002, 6))}
    results, out = tmp_path / "results", tmp_path / "absent_factorial.toml"
    write_store(results, values)
    rc, printed, err = followup(results, out, capsys=capsys)
    assert rc == 0, err
    assert printed.startswith(f"wrote {out}: ")
    assert (
        "note: at small, 1_000_000 the headline is 'gain absent (< 0.02 nats/token)': rd_attnres's gain over "
        "block_attnres is not established there, so the follow-up tests whether rd_attnres's change helps on top "
        "of param_matched's (rd_offset (1,1) against param_matched (1,0)), not whether param_matched absorbs a gain\n"
    ) in printed
    # a grid whose gain is established gets no such line
    write_store(tmp_path / "r2")
    rc, printed, err = followup(tmp_path / "r2", tmp_path / "f2.toml", capsys=capsys)
    assert rc == 0, err
    assert "note:" not in printed


def test_report_of_a_result_file_truncated_after_ingest_says_what_status_and_sql_say(tmp_path, capsys):
    """Row 11: a result file truncated after `report` ingested it: the next report names the file and
    why, counts its run as unreadable (not done), and `sql` no longer counts it either."""
    results = tmp_path / "results"
    store = Store(results)
    frames = synthetic_frames(grid="g", seeds=(0, 1, 2), n_layers=2, n_evals=2)
    run_id = {  # run ids as harness.common.terms.run_id writes them (GRID:SIZE:VARIANT:sSEED:BUDGET)
        r["run_id"]: {"run_id": f"g:{r['size']}:{r['variant']}:s{r['seed']}:{r['budget_tokens']}"}
        for r in frames["runs"].iter_rows(named=True)
    }
    write_results(store, frames, edit=run_id)
    argv = ["report", "--grid", "g", "--results", str(results), "--no-figures"]
    assert cli(argv) == 0
    assert "(21 done)" in capsys.readouterr().out
    damaged = store.result_path("g:small:block_attnres:s0:1000000")
    damaged.write_bytes(damaged.read_bytes()[:500])
    assert cli(argv) == 0
    out = capsys.readouterr().out
    why = "not valid JSON: Unterminated string starting at (char 489; the file has 500 bytes): truncated or damaged"
    named = (
        f"1 result file(s) of grid g in {store.runs_dir} cannot be read ({damaged.name}: {why}): "
        "their runs do not count as finished (fix or remove the files)"
    )
    assert out.count(f"warning: {named}") == 1, out
    assert "(20 done, 1 result file unreadable)" in out
    md = (results / "reports" / "g" / "report.md").read_text()
    assert named in md and "(20 done, 1 result file unreadable)" in md
    assert "its result file could not be read): g:small:block_attnres:s0:1000000;" in md
    assert cli(["sql", "--results", str(results), "--format", "csv", "SELECT count(*) AS n FROM runs"]) == 0
    assert capsys.readouterr().out == "n\n20\n"
