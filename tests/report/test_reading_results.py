"""Reading results on bad input (issue 40): the API and `report` create nothing where they only
read, the report names runs whose result file is gone, the plateau line says above or below.

Real store (harness.store.store.Store) over synthetic runs (harness.report.simulation.synthetic). CPU only, ~20 s:

    python -m pytest -q tests/report/test_reading_results.py
"""

from __future__ import annotations

import pytest
from test_report import write_results

import harness
from harness.cli import main as cli
from harness.report.render.plateau_section import plateau_line
from harness.report.simulation.synthetic import synthetic_frames
from harness.report.stats.plateau import PlateauRow
from harness.store.store import Store


@pytest.mark.parametrize("read", [harness.results, harness.analyze])
def test_the_api_on_a_missing_folder_says_so_and_creates_nothing(tmp_path, read):
    missing = tmp_path / "nonexistent"
    with pytest.raises(FileNotFoundError, match=f"results folder '{missing}' does not exist"):
        read(missing, grid="base")
    assert not missing.exists()


def test_report_of_an_unknown_grid_leaves_no_empty_folder(tmp_path, capsys):
    results = tmp_path / "results"
    write_results(Store(results), synthetic_frames(grid="g", seeds=(0, 1, 2), n_layers=2, n_evals=2))
    assert cli(["report", "--grid", "nosuch", "--results", str(results), "--no-figures"]) == 2
    assert "nosuch" in capsys.readouterr().err
    assert not (results / "reports").exists()
    out = tmp_path / "mine" / "deep"
    assert cli(["report", "--grid", "nosuch", "--results", str(results), "--out", str(out)]) == 2
    assert not (tmp_path / "mine").exists()


def test_report_names_stored_runs_whose_result_file_is_gone(tmp_path, capsys):
    results = tmp_path / "results"
    store = Store(results)
    frames = synthetic_frames(grid="g", seeds=(0, 1, 2), n_layers=2, n_evals=2)
    write_results(store, frames)
    argv = ["report", "--grid", "g", "--results", str(results), "--no-figures"]
    assert cli(argv) == 0
    assert "no result file" not in capsys.readouterr().out
    gone = sorted(frames["runs"]["run_id"].to_list())[:2]
    for run_id in gone:
        store.result_path(run_id).unlink()
    assert cli(argv) == 0
    out = capsys.readouterr().out
    total = frames["runs"].height
    want = (
        f"warning: 2 of {total} runs in the results database have no result file in the results folder's runs/ "
        f"({gone[0]}, {gone[1]}): the database is their only record"
    )
    assert want in out, out
    assert (
        f"2 of {total} runs in the results database have no result file"
        in (results / "reports" / "g" / "report.md").read_text()
    )


def test_the_plateau_line_says_above_for_a_run_above_the_plateau():
    def row(final_max: float) -> PlateauRow:
        return PlateauRow("small", 1_000_000, 5.0, 3, 4.0, 4.5, final_max, 5.0 - final_max, 0.0)

    assert row(5.614).margin < 0
    assert plateau_line(row(5.614)).endswith("the worst run ends 0.614 above it")
    assert plateau_line(row(4.5)).endswith("the worst run ends 0.500 below it")


def test_a_full_disk_is_named_by_the_results_folder_not_a_staging_file_elsewhere(tmp_path):
    import errno
    import shutil

    from harness.common.faults import full_path
    from harness.common.files import FULL_BELOW, full_place

    results = tmp_path / "results"
    results.mkdir()
    staging = tmp_path / "tmp" / "stage.bin"  # tmp_path's disk has room (the test needs it to)
    assert shutil.disk_usage(tmp_path).free >= FULL_BELOW
    assert full_place(staging, results) == results
    inside = results / "runs" / "r.json"
    assert full_place(inside, results) == inside
    exc = OSError(errno.ENOSPC, "No space left on device", str(staging))
    assert full_path(exc, results) == results
