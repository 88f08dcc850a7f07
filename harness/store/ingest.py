"""Ingestion: copy new or changed result files into the database's run tables, idempotently.

A file ``runs/<run_id>.json`` (format: :mod:`harness.store.validate`) is pending when its (size,
mtime_ns, inode) differ from what table ``ingest_log`` recorded. A run's rows are replaced in
one transaction (delete its ``runs`` row and its rows in ``metrics``, ``routing``,
``route_pairs`` and ``route_params``, insert the file's), so ingesting twice leaves identical
tables, and a newer file for a run_id (a retried run) replaces the old rows, except a file
stamped with an older fencing epoch than the stored row's (a write by a worker whose run was
taken over, :mod:`harness.train.fencing`): it is kept out and logged as a stale write. Rows go in as
polars frames (:mod:`harness.store.frames`), never row-by-row. A file that fails to parse or validate is
skipped with a warning and its error is kept in ``ingest_log.error`` (it is retried when the
file changes). The run files are the source of truth: deleting the database loses nothing but
``bench`` rows, and the next ingest rebuilds the run tables.

Every function here works on a connection it is given (:mod:`harness.store.connection` opens them).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import warnings
from pathlib import Path
from typing import Any, NamedTuple

import duckdb
import polars as pl

from harness.store.frames import ArrowStream, frame, polars_schema
from harness.store.validate import ROW_TABLES, validate_result

# Ingest in transactions of at most this many files / per-run rows (metrics, routing, ...): bounds memory and
# lock hold time while keeping per-commit overhead small.
_BATCH_FILES = 256
_BATCH_ROWS = 500_000


class Loaded(NamedTuple):
    """One result file as read: its stat (of the bytes read) and its validated result or why not."""

    path: Path
    stat: os.stat_result
    result: dict[str, Any] | None  # validated result, None if unreadable/invalid
    error: str | None


def signature(st: os.stat_result) -> tuple[int, int, int]:
    """``(size, mtime_ns, inode)``: what ``ingest_log`` records of an ingested file."""
    # os.replace always installs a new inode, so a rewrite changes the signature even when
    # size and (coarse) mtime happen to match.
    return (st.st_size, st.st_mtime_ns, st.st_ino)


def result_files(runs_dir: Path) -> list[tuple[Path, os.stat_result]]:
    """``*.json`` in runs_dir (hidden and tmp files excluded), oldest first."""
    if not runs_dir.is_dir():
        return []
    out = []
    for entry in os.scandir(runs_dir):
        if entry.name.startswith(".") or not entry.name.endswith(".json"):
            continue
        try:
            st = entry.stat()
        except FileNotFoundError:  # deleted meanwhile
            continue
        if entry.is_file():
            out.append((Path(entry.path), st))
    out.sort(key=lambda item: (item[1].st_mtime_ns, item[0].name))
    return out


def read_log(con: duckdb.DuckDBPyConnection) -> dict[str, tuple[int, int, int]]:
    """``{file name: signature}`` of the files ``ingest_log`` recorded ({} before any ingest)."""
    try:
        rows = con.execute("SELECT file, size_bytes, mtime_ns, inode FROM ingest_log").fetchall()
    except duckdb.CatalogException:  # database made before any ingest
        return {}
    return {file: (size, mtime, inode) for file, size, mtime, inode in rows}


def read_errors(con: duckdb.DuckDBPyConnection) -> dict[str, str]:
    """``{file name: why}`` of the files ``ingest_log`` recorded as not ingested (call after
    :func:`read_log` found a log)."""
    return dict(con.execute("SELECT file, error FROM ingest_log WHERE error IS NOT NULL").fetchall())


def changed(files: list[tuple[Path, os.stat_result]], logged: dict[str, tuple[int, int, int]]) -> list[Path]:
    """The ``files`` (from :func:`result_files`) not in ``logged`` as they are now, in order."""
    return [p for p, st in files if logged.get(p.name) != signature(st)]


def ingest_into(con: duckdb.DuckDBPyConnection, runs_dir: Path) -> int:
    """Ingest the pending files of ``runs_dir`` with ``con`` (a write connection, schema
    applied), in batches; returns the number of run files (re)ingested."""
    logged = read_log(con)
    todo = changed(result_files(runs_dir), logged)
    count = 0
    batch: list[Loaded] = []
    batch_rows = 0
    for path in todo:
        loaded = load(path)
        if loaded is None:
            continue
        batch.append(loaded)
        if loaded.result is not None:
            batch_rows += sum(len(loaded.result[t]) for t in ROW_TABLES)
        if len(batch) >= _BATCH_FILES or batch_rows >= _BATCH_ROWS:
            count += commit(con, batch)
            batch, batch_rows = [], 0
    if batch:
        count += commit(con, batch)
    return count


def load(path: Path) -> Loaded | None:
    """Read and validate one result file; ``None`` if it was deleted since listing. A file
    that fails to parse or validate warns (attributed to the caller of the ingesting
    function) and comes back with ``result`` None and ``error`` saying why."""
    try:
        with open(path, "rb") as f:
            # stat the open file so the recorded signature belongs to the bytes read
            st = os.fstat(f.fileno())
            data = f.read()
    except FileNotFoundError:  # deleted since listing
        return None
    try:
        return Loaded(path, st, validate_result(json.loads(data)), None)
    except ValueError as exc:  # includes JSONDecodeError and UnicodeDecodeError
        why = str(exc)
        if isinstance(exc, json.JSONDecodeError):
            why = f"not valid JSON: {exc.msg} (char {exc.pos}; the file has {len(data)} bytes): truncated or damaged"
        elif isinstance(exc, UnicodeDecodeError):
            why = f"not UTF-8 text (byte {exc.start} of {len(data)}): damaged"
        warnings.warn(f"skipping result file {path}: {why}", stacklevel=3)
        return Loaded(path, st, None, why)


def unreadable_files(
    files: list[tuple[Path, os.stat_result]], logged: dict[str, tuple[int, int, int]], errors: dict[str, str]
) -> list[tuple[str, str]]:
    """``(file name, why)`` of the ``files`` that ingestion cannot take, sorted: the ``errors``
    recorded at ingestion for files unchanged since (``logged``), and the others loaded now
    (without warnings)."""
    out = []
    for path, st in files:
        if logged.get(path.name) == signature(st):
            if path.name in errors:
                out.append((path.name, errors[path.name]))
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            loaded = load(path)
        if loaded is not None and loaded.error is not None:
            out.append((path.name, loaded.error))
    return sorted(out)


def stale(con: duckdb.DuckDBPyConnection, latest: dict[str, dict[str, Any]]) -> dict[str, str]:
    """``{run_id: why}`` of results stamped with an older fencing epoch than the run's stored row."""
    stamped = [rid for rid, r in latest.items() if r["run"].get("epoch") is not None]
    if not stamped:
        return {}
    rows = con.execute(
        "SELECT run_id, epoch, owner FROM runs WHERE epoch IS NOT NULL AND list_contains(?, run_id)",
        [stamped],
    ).fetchall()
    out = {}
    for rid, epoch, owner in rows:
        new = latest[rid]["run"]
        if new["epoch"] < epoch:
            out[rid] = (
                f"stale write: epoch {new['epoch']} by {new.get('owner')}, written after the run was "
                f"taken over; the store keeps epoch {epoch} by {owner}"
            )
    return out


def _drop_damaged(con: duckdb.DuckDBPyConnection, files: list[str]) -> None:
    """Delete the rows that ``files`` (names in ``runs/``, now unreadable) held when they were last
    ingested: the database is a cache of the result files, so a run whose file was damaged after
    ingestion no longer counts, in `sql` as in `status` and `report`. A run re-ingested from
    another file of the same batch (``_in_runs``) keeps its new rows."""
    if not files:
        return
    for table in (*ROW_TABLES, "runs"):
        con.execute(
            f"DELETE FROM {table} WHERE run_id IN (SELECT run_id FROM ingest_log WHERE list_contains(?, file)) "
            "AND run_id NOT IN (SELECT run_id FROM _in_runs)",
            [files],
        )


def commit(con: duckdb.DuckDBPyConnection, batch: list[Loaded]) -> int:
    """Replace the rows of every run in ``batch`` in one transaction; returns files ingested."""
    latest: dict[str, dict[str, Any]] = {}
    damaged = [i.path.name for i in batch if i.result is None]  # cannot be read now (not a stale write)
    for item in batch:  # oldest first, so the newest file of a run_id wins
        if item.result is not None:
            latest[item.result["run"]["run_id"]] = item.result
    kept_out = stale(con, latest)
    if (
        kept_out
    ):  # kept out, and logged with why (harness.train.fencing: a write by a worker whose run was taken over)
        batch = [
            i._replace(result=None, error=kept_out[i.result["run"]["run_id"]])
            if i.result is not None and i.result["run"]["run_id"] in kept_out
            else i
            for i in batch
        ]
        latest = {rid: r for rid, r in latest.items() if rid not in kept_out}
    results = list(latest.values())
    now = dt.datetime.now(dt.UTC).replace(tzinfo=None)
    frames = {
        "_in_runs": frame("runs", [r["run"] for r in results]),
        **{f"_in_{t}": frame(t, [x for r in results for x in r[t]]) for t in ROW_TABLES},
        "_in_log": pl.DataFrame(
            {
                "file": [i.path.name for i in batch],
                "run_id": [i.result["run"]["run_id"] if i.result else None for i in batch],
                "size_bytes": [i.stat.st_size for i in batch],
                "mtime_ns": [i.stat.st_mtime_ns for i in batch],
                "inode": [i.stat.st_ino for i in batch],
                "ingested_at": [now] * len(batch),
                "error": [i.error for i in batch],
            },
            schema=polars_schema("ingest_log"),
        ),
    }
    for name, df in frames.items():
        con.register(name, ArrowStream(df))
    try:
        con.begin()
        try:
            _drop_damaged(con, damaged)
            for table in (*ROW_TABLES, "runs"):
                con.execute(f"DELETE FROM {table} WHERE run_id IN (SELECT run_id FROM _in_runs)")
            for table in ("runs", *ROW_TABLES):
                con.execute(f"INSERT INTO {table} BY NAME SELECT * FROM _in_{table}")
            con.execute("DELETE FROM ingest_log WHERE file IN (SELECT file FROM _in_log)")
            con.execute("INSERT INTO ingest_log BY NAME SELECT * FROM _in_log")
            con.commit()
        except BaseException:
            con.rollback()
            raise
    finally:
        for name in frames:
            con.unregister(name)
    return sum(1 for i in batch if i.result is not None)
