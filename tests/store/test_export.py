"""`harness export` (harness/store/store.py Store.export, harness/commands/export.py): one grid's rows of a results
table to Parquet or CSV, atomically; bad grid/table/format are one line naming what is allowed.
Real DuckDB store, synthetic result files; CPU only, ~5 s:

    python -m pytest -q tests/store/test_export.py
"""

from __future__ import annotations

import csv
import math

import pandas as pd
import polars as pl
import pytest
from test_db_store import make_result

from harness.cli import main as cli
from harness.common.terms import EXPORT_TABLES
from harness.store.store import MACHINE_COLUMNS, Store


def result(run_id: str, grid: str, seed: int, nll: float) -> dict:
    r = make_result(run_id, seed=seed, val={500: nll + 1, 1000: nll})
    r["run"]["grid"] = grid
    return r


@pytest.fixture
def results(tmp_path):
    store = Store(tmp_path)
    for i, (grid, seed) in enumerate([("g", 0), ("g", 1), ("h", 0)]):
        store.write_result(result(f"{grid}-run-{seed}", grid, seed, 3.0 + i / 7))
    store.ingest()
    store.write_result(result("g-run-2", "g", 2, 3.5))  # pending: export ingests it first
    return tmp_path


def expected(store: Store, table: str, grid: str) -> pl.DataFrame:
    where = "grid = ?" if table in ("final", "runs") else "run_id IN (SELECT run_id FROM runs WHERE grid = ?)"
    rows = store.query(f"SELECT * FROM {table} WHERE {where} ORDER BY ALL", [grid], ingest=False)
    return rows.drop([c for c in MACHINE_COLUMNS if c in rows.columns])


def export(results, table: str, fmt: str, out) -> int:
    """`harness export --grid g` of ``table`` as ``fmt`` to ``out``; the exit status."""
    argv = ["export", "--grid", "g", "--table", table, "--format", fmt, "--out", str(out)]
    return cli([*argv, "--results", str(results)])


def test_an_export_names_no_machine(tmp_path, capsys):
    """The store keeps the writer's host and host:pid; a file made to be shared holds neither."""
    results, store = tmp_path, Store(tmp_path)
    r = result("g-run-0", "g", 0, 3.0)
    r["run"].update(host="lab-node-17.example.org", owner="lab-node-17.example.org:4242")
    store.write_result(r)
    hosts = store.query("SELECT DISTINCT host, owner FROM runs", ingest=True)
    assert hosts.height and hosts["host"][0]  # there is a host name to leak
    out = results / "runs.csv"
    assert export(results, "runs", "csv", out) == 0
    text = out.read_text()
    assert not set(MACHINE_COLUMNS) & set(text.splitlines()[0].split(","))
    assert "lab-node-17" not in text


@pytest.mark.parametrize("table", EXPORT_TABLES)
def test_parquet_holds_exactly_the_grids_rows(results, table, capsys):
    out = results / "out" / f"{table}.parquet"
    assert export(results, table, "parquet", out) == 0
    want = expected(Store(results), table, "g")
    got = pl.read_parquet(out)
    assert want.height > 0 and set(want["run_id"]) == {"g-run-0", "g-run-1", "g-run-2"}
    assert got.columns == want.columns and got.rows() == want.rows()
    assert capsys.readouterr().out == f"wrote {want.height} rows of {table} (grid g) to {out} (parquet)\n"
    assert [p.name for p in out.parent.iterdir()] == [out.name]  # no temporary file left beside it


def test_csv_has_a_header_and_every_digit(results, capsys):
    out = results / "final.csv"
    assert (
        cli(["export", "--grid", "g", "--format", "csv", "--out", str(out), "--results", str(results)]) == 0
    )
    rows = list(csv.DictReader(out.open()))
    want = expected(Store(results), "final", "g")
    assert list(rows[0]) == want.columns
    assert [(r["run_id"], float(r["val_nll"]), float(r["val_ppl"])) for r in rows] == [
        (r["run_id"], r["val_nll"], r["val_ppl"]) for r in want.iter_rows(named=True)
    ]
    assert float(rows[1]["val_nll"]) == 3.0 + 1 / 7 and float(rows[2]["val_ppl"]) == math.exp(3.5)


def test_pandas_reads_the_parquet_export(results):
    """The export is offered for pandas: pandas (through pyarrow, a dependency) reads every
    column and value DuckDB holds for the grid."""
    out = results / "final.parquet"
    assert (
        cli(["export", "--grid", "g", "--format", "parquet", "--out", str(out), "--results", str(results)])
        == 0
    )
    frame = pd.read_parquet(out)
    want = expected(Store(results), "final", "g")
    assert list(frame.columns) == want.columns and len(frame) == want.height == 3
    assert frame["run_id"].tolist() == want["run_id"].to_list()
    assert frame["val_nll"].tolist() == want["val_nll"].to_list()  # the same doubles
    assert frame["val_nll"].tolist()[1] == 3.0 + 1 / 7


def test_an_existing_file_is_replaced_whole_and_a_failed_export_leaves_it(results, capsys):
    out = results / "final.parquet"
    out.write_text("old")
    assert (
        cli(["export", "--grid", "h", "--format", "parquet", "--out", str(out), "--results", str(results)])
        == 0
    )
    assert pl.read_parquet(out)["run_id"].to_list() == ["h-run-0"]
    before = out.read_bytes()
    assert (
        cli(["export", "--grid", "nope", "--format", "parquet", "--out", str(out), "--results", str(results)])
        == 2
    )
    assert out.read_bytes() == before
    folder = results / "a_folder"
    folder.mkdir()
    capsys.readouterr()
    assert (
        cli(["export", "--grid", "g", "--format", "csv", "--out", str(folder), "--results", str(results)])
        == 1
    )
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"harness export: error: cannot write {folder}: ")
    assert folder.is_dir() and not [p for p in results.iterdir() if p.name.endswith(".tmp")]


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["--grid", "nope", "--format", "csv"],
            "no runs of grid 'nope' in the results store {db}; grids there: g, h",
        ),
        (
            ["--grid", "g", "--table", "bench", "--format", "csv"],
            "--table 'bench' not known; allowed: final, runs, metrics, routing, route_pairs, route_params",
        ),
        (["--grid", "g", "--format", "xlsx"], "--format 'xlsx' not known; allowed: parquet, csv"),
    ],
)
def test_bad_grid_table_or_format_is_one_line_naming_the_allowed(results, capsys, argv, message):
    out = results / "x.out"
    assert cli(["export", *argv, "--out", str(out), "--results", str(results)]) == 2
    err = capsys.readouterr().err
    assert err == f"harness export: error: {message.format(db=results / 'harness.duckdb')}\n"
    assert not out.exists()


def test_an_empty_store_says_there_are_no_grids_yet(tmp_path, capsys):
    assert (
        cli(
            [
                "export",
                "--grid",
                "g",
                "--format",
                "csv",
                "--out",
                str(tmp_path / "x.csv"),
                "--results",
                str(tmp_path),
            ]
        )
        == 2
    )
    assert capsys.readouterr().err.endswith("; grids there: none yet\n")
