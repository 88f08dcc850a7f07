"""The results database opens in the DuckDB CLI users install (1.5.x; the `duckdb-cli` package on PyPI
is that release's real binary): harness/store/connection.py writes DuckDB storage format v1.4.0, and rewrites a
database an earlier harness left in DuckDB 2.0's newer format, once, keeping every row.
CPU only, ~10 s:

    python -m pytest -q tests/store/test_duckdb_cli.py
"""

from __future__ import annotations

import csv
import importlib.util
import io
import subprocess
import sys

import duckdb
import pytest
from test_db_store import make_result

from harness.store.connection import STORAGE_VERSION, storage_version
from harness.store.store import Store
from harness.store.validate import ROW_TABLES

CLI_VERSION = "v1.5."  # the release line users install today


def duckdb_cli(*args: str) -> subprocess.CompletedProcess:
    """The DuckDB CLI of the `duckdb-cli` package (a test dependency: pip install -e '.[test]')."""
    if importlib.util.find_spec("duckdb_cli") is None:
        pytest.fail(
            "the DuckDB CLI is not installed: pip install -c requirements.lock -e '.[test]' "
            "(package duckdb-cli, the CLI release users install)"
        )
    return subprocess.run(
        [sys.executable, "-m", "duckdb_cli", *args], capture_output=True, text=True, timeout=120
    )


def cli_rows(db, sql: str) -> list[dict]:
    proc = duckdb_cli("-readonly", str(db), "-csv", "-c", sql)
    assert proc.returncode == 0, proc.stderr
    return list(csv.DictReader(io.StringIO(proc.stdout)))


def filled(tmp_path) -> Store:
    store = Store(tmp_path)
    for seed in range(3):
        store.write_result(make_result(f"run-{seed}", seed=seed, val={500: 5.0, 1000: 4.0 - seed / 7}))
    store.ingest()
    store.add_bench_rows(
        [{"bench_id": "b1", "size": "tiny", "variant": "rd_attnres", "tokens_per_s": 1234.5}]
    )
    return store


def contents(db) -> dict[str, list[tuple]]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        out = {
            t: con.execute(f"SELECT * FROM {t} ORDER BY ALL").fetchall()
            for t in ("runs", *ROW_TABLES, "bench", "final", "meta")
        }
        out["constraints"] = con.execute(
            "SELECT table_name, constraint_type, constraint_text FROM duckdb_constraints() "
            "WHERE database_name = current_database() ORDER BY ALL"
        ).fetchall()
        return out
    finally:
        con.close()


def test_the_cli_is_the_release_users_install():
    proc = duckdb_cli("--version")
    assert proc.returncode == 0 and proc.stdout.startswith(CLI_VERSION), proc.stdout + proc.stderr


def test_a_new_results_database_opens_in_the_duckdb_cli(tmp_path):
    store = filled(tmp_path)
    con = duckdb.connect(str(store.db_path), read_only=True)
    assert storage_version(con) == STORAGE_VERSION + "+"
    con.close()
    rows = cli_rows(store.db_path, "select run_id, val_nll, val_ppl from final order by run_id")
    want = store.query("select run_id, val_nll, val_ppl from final order by run_id", ingest=False)
    assert [(r["run_id"], float(r["val_nll"]), float(r["val_ppl"])) for r in rows] == want.rows()
    assert cli_rows(store.db_path, "select count(*) as n from routing") == [
        {"n": str(store.query("select count(*) from routing", ingest=False).item())}
    ]
    # the database keeps its format when the harness writes to it again
    store.write_result(make_result("run-9", seed=9))
    assert store.ingest() == 1
    assert cli_rows(store.db_path, "select count(*) as n from runs") == [{"n": "4"}]


def test_a_database_in_the_newer_format_is_rewritten_once_keeping_every_row(tmp_path, capsys):
    from harness.cli import main as cli

    store = filled(tmp_path)
    # what an earlier harness left: the same database in DuckDB 2.0's own format
    newer = tmp_path / "newer.duckdb"
    con = duckdb.connect(str(newer))
    con.execute(f"ATTACH '{store.db_path}' AS old (READ_ONLY)")
    con.execute("COPY FROM DATABASE old TO newer")
    con.execute("DETACH old")
    assert _version(storage_version(con)) > _version(STORAGE_VERSION)
    con.close()
    newer.replace(store.db_path)
    before = contents(store.db_path)
    old = duckdb_cli("-readonly", str(store.db_path), "-c", "select 1")
    assert old.returncode != 0 and "version number" in old.stderr  # what users of the 1.5 CLI saw

    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness",
            "sql",
            "select count(*) as n from final",
            "--results",
            str(tmp_path),
            "--format",
            "csv",
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0 and proc.stdout == "n\n3\n", proc.stderr
    assert proc.stderr.startswith(
        f"harness: rewrote {store.db_path} in DuckDB storage format {STORAGE_VERSION} "
        "(it was v2.0.0+), so that the DuckDB 1.4 and 1.5 CLIs can open it"
    )
    assert contents(store.db_path) == before  # bench rows too: nothing lost
    assert [r["variant"] for r in cli_rows(store.db_path, "select variant from bench")] == ["rd_attnres"]
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith((".tmp", ".wal"))]
    assert cli(["sql", "select 1", "--results", str(tmp_path)]) == 0
    assert "rewrote" not in capsys.readouterr().err  # once: no second rewrite


def _version(tag: str) -> tuple[int, ...]:
    return tuple(int(p) for p in tag.strip("v+").split("."))
