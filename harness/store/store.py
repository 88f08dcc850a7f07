"""The DuckDB results store (DESIGN section 5): per-run files, idempotent ingestion, read-only SQL.

Why files first. DuckDB lets one process at a time open a database file read-write, and that
holder also blocks every read-only opener in other processes. So a worker never opens the
database: it writes each finished run to its own file ``RESULTS/runs/<run_id>.json``
(format: :mod:`harness.store.validate`) atomically (:func:`harness.common.files.atomic_write`: a tmp file in the
same folder, fsync, ``os.replace``, fsync of the folder), which cannot fail on a lock and never
leaves a half-written file under a name ingestion reads (it reads ``*.json`` only; tmp files
end in ``.tmp``).

:class:`Store` is the facade over the results folder. :meth:`Store.ingest` (also run before
each :meth:`Store.query`) copies new or changed files into ``RESULTS/harness.duckdb``
(:mod:`harness.store.ingest`: pending files, idempotent replacement by run_id, stale writes kept out).
Connections are short-lived and retried while locked, up to ``lock_timeout_s``
(:mod:`harness.store.connection`: :class:`StoreLockedError`, the schema, storage format
:data:`STORAGE_VERSION`); rows travel as polars frames (:mod:`harness.store.frames`). :meth:`Store.query`
ingests best effort (one try; if the database is busy it queries what is there and records
why in ``last_ingest_skipped``) and runs the user's SQL on a read-only connection with file
access disabled, so a query can neither change results nor read or write other files.
:meth:`Store.export` writes a table of one grid to Parquet or CSV (``COPY ... TO`` on our own
connection; user SQL may not write files).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb
import polars as pl

from harness.common.files import atomic_path
from harness.common.interrupt import interrupt_natively
from harness.common.terms import EXPORT_FORMATS, EXPORT_TABLES, check_grid
from harness.store.connection import StoreLockedError, connect, create, ensure_schema
from harness.store.frames import ArrowStream, frame, to_polars, to_polars_batches
from harness.store.ingest import changed, ingest_into, read_errors, read_log, result_files, unreadable_files
from harness.store.runfile import RUNS_DIRNAME, read_result, result_path, run_end, write_result
from harness.store.validate import columns, validate_bench_rows

# Importable from here as before the split: STORAGE_VERSION, StoreLockedError, storage_version.

#: DuckDB type of an axis column by the JSON types of its stored values (:func:`axis_views`).
_JSON_TYPES = (
    ({"BIGINT", "UBIGINT"}, "BIGINT"),
    ({"BIGINT", "UBIGINT", "DOUBLE"}, "DOUBLE"),
    ({"BOOLEAN"}, "BOOLEAN"),
)


def axis_views(con: duckdb.DuckDBPyConnection) -> list[str]:
    """Give a query one column per grid axis (DESIGN section 1.2, ``[axes]``) in ``runs`` and ``final``: temporary
    views of the same names over the stored ones, with the axis value of each run of a grid with ``[axes]``
    (``runs.config``'s ``axes``; NULL for other runs), typed as its stored values are (integers BIGINT, numbers
    DOUBLE, booleans BOOLEAN, else VARCHAR). Nothing is created where no run has an axis, so a store without
    axes reads exactly as before; a key that is already a column of the view is left out.

    Returns:
        The axis columns, sorted.
    """
    rows = con.execute(
        "SELECT k, list(DISTINCT json_type(config->'axes'->k)) FROM (SELECT config, unnest(json_keys(config->'axes')) "
        "AS k FROM runs WHERE json_type(config->'axes') = 'OBJECT') GROUP BY k ORDER BY k"
    ).fetchall()
    keys = {k: next((t for types, t in _JSON_TYPES if set(seen) <= types), "VARCHAR") for k, seen in rows}
    keys = {k: t for k, t in keys.items() if re.fullmatch(r"[a-z_][a-z_0-9]*", k)}
    if not keys:
        return []
    (catalog,) = con.execute("SELECT current_database()").fetchall()[0]
    for view in ("runs", "final"):
        taken = {
            c
            for (c,) in con.execute(f'SELECT column_name FROM (DESCRIBE "{catalog}".main.{view})').fetchall()
        }
        cols = "".join(
            f", TRY_CAST(a.config->'axes'->>'{k}' AS {t}) AS {k}" for k, t in keys.items() if k not in taken
        )
        con.execute(
            f'CREATE OR REPLACE TEMP VIEW {view} AS SELECT v.*{cols} FROM "{catalog}".main.{view} v '
            f'LEFT JOIN "{catalog}".main.runs a ON a.run_id = v.run_id'
        )
    return sorted(keys)


__all__ = [
    "axis_views",
    "DB_NAME",
    "DEFAULT_LOCK_TIMEOUT_S",
    "Store",
]

DB_NAME = "harness.duckdb"
DEFAULT_LOCK_TIMEOUT_S = 10.0
#: Columns naming the machine that wrote a row (runs.host, runs.owner = host:pid): kept in the store, left
#: out of what is shared (`harness export`; an archive drops the same keys, harness.store.archive.MACHINE_KEYS).
MACHINE_COLUMNS = ("host", "owner")


class Store:
    """The results folder: run files under ``runs/`` and the DuckDB database beside them.

    Args:
        results_dir: the results folder (created lazily, on the first write).
        lock_timeout_s: how long to keep retrying when another process holds the database
            lock before raising :class:`StoreLockedError` (seconds).

    Attributes:
        results_dir, runs_dir (``results_dir/'runs'``), db_path (``results_dir/'harness.duckdb'``).
        last_ingest_skipped: after :meth:`query` (with ``ingest``), None if pending files were
            ingested, else a sentence saying why not (the database was busy; the folder is
            read-only for this process) and what the query saw instead.

    Example::

        store = Store("results")
        store.write_result({"run": {...}, "metrics": [...], "routing": [...]})
        store.query("select variant, avg(val_nll) from final group by 1")
    """

    def __init__(self, results_dir: str | os.PathLike, *, lock_timeout_s: float = DEFAULT_LOCK_TIMEOUT_S):
        self.results_dir = Path(results_dir)
        self.runs_dir = self.results_dir / RUNS_DIRNAME
        self.db_path = self.results_dir / DB_NAME
        if lock_timeout_s < 0:
            raise ValueError(f"lock_timeout_s = {lock_timeout_s} must be >= 0 seconds")
        self.lock_timeout_s = float(lock_timeout_s)
        self.last_ingest_skipped: str | None = None
        self._memory: duckdb.DuckDBPyConnection | None = None  # read-only folder without a database

    def __repr__(self) -> str:
        return f"Store({str(self.results_dir)!r})"

    # -- run files ----------------------------------------------------------------------------

    def result_path(self, run_id: str) -> Path:
        """Where the result file of ``run_id`` lives (:func:`harness.store.runfile.result_path`)."""
        return result_path(self.results_dir, run_id)

    def write_result(self, result: dict, *, commit=None) -> Path:
        """Validate a finished run and write it atomically to its own file; no database access
        (:func:`harness.store.runfile.write_result`: arguments, return value and errors)."""
        return write_result(self.results_dir, result, commit=commit)

    def read_result(self, path: str | os.PathLike) -> dict:
        """Read and validate one result file (:func:`harness.store.runfile.read_result`).

        Raises:
            FileNotFoundError: no such file.
            ValueError: not JSON, or not a valid result (the message names the field).
        """
        return read_result(path)

    def run_end(self, run_id: str) -> dict | None:
        """How run ``run_id`` ended, from its result file: ``{"status", "val_nll", "error"}``,
        or ``None`` without a readable result file of that run (:func:`harness.store.runfile.run_end`)."""
        return run_end(self.results_dir, run_id)

    # -- database connections (harness.store.connection; methods so that tests can watch the schema go in) ----

    def _connect(
        self, *, read_only: bool, timeout_s: float, files: bool = False
    ) -> duckdb.DuckDBPyConnection:
        """Open the database, retrying while another process holds the lock (:func:`harness.store.connection.connect`;
        a new database gets its schema from :meth:`_ensure_schema`).

        Raises:
            StoreLockedError: still locked after ``timeout_s`` seconds (0: one try).
        """
        con = connect(
            self.db_path, read_only=read_only, timeout_s=timeout_s, files=files, init=self._ensure_schema
        )
        interrupt_natively(con)  # a Ctrl-C stops its query at once (DuckDB may not run Python's handler)
        return con

    def _create(self) -> None:
        """Make the database file whole, then give it its name (:func:`harness.store.connection.create`)."""
        create(self.db_path, self._ensure_schema)

    def _ensure_schema(self, con: duckdb.DuckDBPyConnection) -> None:
        """Apply db/schema.sql if the database was made with another version of it
        (:func:`harness.store.connection.ensure_schema`)."""
        ensure_schema(con)

    # -- ingestion (harness.store.ingest) ------------------------------------------------------------------

    def pending(self) -> list[Path]:
        """Result files not yet ingested, or changed since they were (oldest first).

        Raises:
            StoreLockedError: the database stayed locked for ``lock_timeout_s``.
        """
        files = result_files(self.runs_dir)
        if not files or not self.db_path.exists():
            return [p for p, _ in files]
        con = self._connect(read_only=True, timeout_s=self.lock_timeout_s)
        try:
            logged = read_log(con)
        finally:
            con.close()
        return changed(files, logged)

    def ingest(self) -> int:
        """Copy pending result files into the database; idempotent.

        Returns:
            The number of run files (re)ingested (invalid files, skipped with a warning, are
            not counted).

        Raises:
            StoreLockedError: the database stayed locked for ``lock_timeout_s``.
        """
        con = self._connect(read_only=False, timeout_s=self.lock_timeout_s)
        try:
            self._ensure_schema(con)
            return ingest_into(con, self.runs_dir)
        finally:
            con.close()

    # -- queries ------------------------------------------------------------------------------

    def query(self, sql: str, params: list | None = None, *, ingest: bool = True) -> pl.DataFrame:
        """Run SQL on a read-only connection and return the result as a polars frame.

        Pending result files are ingested first, best effort: if another process holds the
        database (even a reader blocks a writer), ingestion is skipped, ``last_ingest_skipped``
        says why, and the query sees what is there. In a folder this process cannot write
        (a read-only mount) nothing is ingested or created (:meth:`_read_only_connection`). On an
        empty results folder the schema is created, so e.g. ``select * from final`` returns
        an empty frame.

        Args:
            sql: one or more statements (the last one's result is returned). File access
                (``read_csv``, ``COPY``, ``ATTACH``) is disabled; writes fail (read-only).
            params: values for ``?`` placeholders.
            ingest: set False to skip ingestion (e.g. many queries in a row after one ingest).

        Returns:
            The result; a statement without rows gives DuckDB's status frame, an empty string
            an empty frame. Duplicate column names get ``_1``, ``_2`` suffixes; INTERVAL and
            UNION values come back as text.

        Raises:
            duckdb.Error: the statement failed (DuckDB's message); nothing was changed.
            StoreLockedError: the database stayed write-locked for ``lock_timeout_s``.
        """
        with self._reading(ingest) as con:
            axis_views(con)
            return self._run(con, sql, params)

    @contextmanager
    def query_batches(
        self, sql: str, params: list | None = None, *, ingest: bool = True, rows: int = 65_536
    ) -> Iterator[Iterator[pl.DataFrame]]:
        """:meth:`query`, streamed: a block in which the result comes as polars frames of at most
        ``rows`` rows each, read from DuckDB as they are consumed (one batch in memory at a time;
        ``harness sql`` prints millions of rows this way). The connection stays open for the block.

        Raises:
            as :meth:`query`.
        """
        with self._reading(ingest) as con:
            axis_views(con)
            rel = con.sql(sql, params=params)
            yield iter([pl.DataFrame()]) if rel is None else to_polars_batches(rel, rows)

    @contextmanager
    def _reading(self, ingest: bool) -> Iterator[duckdb.DuckDBPyConnection]:
        """The connection a query runs on, after ingesting (see :meth:`query`); closed after the block
        (unless it is the in-memory copy of a read-only folder, kept for the next queries)."""
        if ingest:
            self.last_ingest_skipped = None
            if not self.writable():
                with self._read_only_connection() as con:
                    yield con
                return
            self._ingest_best_effort()
        elif self._memory is not None:
            yield self._memory
            return
        if not self.db_path.exists():
            con = self._connect(read_only=False, timeout_s=self.lock_timeout_s)
            try:
                self._ensure_schema(con)
            finally:
                con.close()
        con = self._connect(read_only=True, timeout_s=self.lock_timeout_s)
        try:
            yield con
        finally:
            con.close()

    def grids(self) -> list[str]:
        """The grid names of the runs in the database (sorted; pending files not ingested)."""
        if not self.db_path.exists():
            return []
        con = self._connect(read_only=True, timeout_s=self.lock_timeout_s)
        try:
            return sorted(str(g) for (g,) in con.execute("SELECT DISTINCT grid FROM runs").fetchall())
        finally:
            con.close()

    def export(self, grid: str, table: str, fmt: str, out: str | os.PathLike) -> int:
        """Write ``table``'s rows of ``grid`` to the file ``out`` with DuckDB's ``COPY ... TO``.

        Pending result files are ingested first, best effort (as :meth:`query`). The file is
        written under a temporary name beside ``out`` and renamed onto it (:func:`atomic_path`):
        a reader never sees half of it, and a failed export leaves ``out`` as it was. Rows are
        sorted (``ORDER BY ALL``), so the same store gives the same file.

        Args:
            grid: a grid name in ``runs.grid``.
            table: one of :data:`EXPORT_TABLES`; for ``final`` and ``runs`` the grid's rows, for
                the others the rows of the grid's runs.
            fmt: ``parquet`` or ``csv`` (with a header); JSON columns (``runs.config``) as text; the
                columns naming the writer's machine (:data:`MACHINE_COLUMNS`) left out.
            out: the file to write (replaced if it exists; its folder is created).

        Returns:
            The number of rows written.

        Raises:
            ValueError: an unknown table or format, or a grid with no runs in the store (the
                message names the allowed values / the grids there).
            StoreLockedError: the database stayed write-locked for ``lock_timeout_s``.
        """
        if table not in EXPORT_TABLES:
            raise ValueError(f"--table {table!r} not known; allowed: {', '.join(EXPORT_TABLES)}")
        if fmt not in EXPORT_FORMATS:
            raise ValueError(f"--format {fmt!r} not known; allowed: {', '.join(EXPORT_FORMATS)}")
        self.last_ingest_skipped = None
        self._ingest_best_effort()
        check_grid(grid, self.grids(), f"the results store {self.db_path}")
        where = (
            "grid = ?" if table in ("final", "runs") else "run_id IN (SELECT run_id FROM runs WHERE grid = ?)"
        )
        # JSON columns as text: Parquet readers would see DuckDB's JSON as raw bytes
        as_text = [c for c, t in columns().get(table, {}).items() if t == "JSON"]
        # a file to share names no machine: the writer's host and host:pid stay in the store (as in an archive)
        machine = [c for c in MACHINE_COLUMNS if c in columns().get(table, {})]
        star = "*" + (f" EXCLUDE ({', '.join(machine)})" if machine else "")
        star += f" REPLACE ({', '.join(f'{c}::VARCHAR AS {c}' for c in as_text)})" if as_text else ""
        con = self._connect(read_only=True, timeout_s=self.lock_timeout_s, files=True)
        try:
            with atomic_path(out) as tmp:
                # table, columns and format come from our lists, never from the user's text
                (rows,) = con.execute(
                    f"COPY (SELECT {star} FROM {table} WHERE {where} ORDER BY ALL) TO ? (FORMAT {fmt})",
                    [grid, str(tmp)],
                ).fetchone()
        finally:
            con.close()
        return int(rows)

    @staticmethod
    def _run(con: duckdb.DuckDBPyConnection, sql: str, params: list | None) -> pl.DataFrame:
        rel = con.sql(sql, params=params)
        return pl.DataFrame() if rel is None else to_polars(rel)

    def writable(self) -> bool:
        """Whether this process may write the results folder (and its database): False for a
        read-only mount or someone else's folder. A folder not yet made counts as writable."""
        if not self.results_dir.exists():
            return True
        return os.access(self.results_dir, os.W_OK) and (
            not self.db_path.exists() or os.access(self.db_path, os.W_OK)
        )

    @contextmanager
    def _read_only_connection(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """:meth:`query`'s connection in a folder this process cannot write: nothing is ingested or created.

        With a database there, the query reads it as it is (result files it lacks are counted
        in ``last_ingest_skipped``); without one, the result files are read into an in-memory
        database (kept for the next ``ingest=False`` queries) and the query runs there.
        """
        where = f"the results folder {self.results_dir} is read-only for this process"
        if self.db_path.exists():
            n = len(self.pending())
            self.last_ingest_skipped = (
                f"{where}: {n} new result file(s) were not ingested; the tables lack them"
                if n
                else f"{where}: its database was read as it is (nothing to ingest)"
            )
            con = self._connect(read_only=True, timeout_s=self.lock_timeout_s)
            try:
                yield con
            finally:
                con.close()
            return
        if self._memory is None:
            con = duckdb.connect(":memory:")
            interrupt_natively(con)
            self._ensure_schema(con)
            ingest_into(con, self.runs_dir)
            con.execute("SET enable_external_access = false")
            con.execute("SET lock_configuration = true")
            self._memory = con
        n = len(result_files(self.runs_dir))
        self.last_ingest_skipped = (
            f"{where} and has no database: the query ran on an in-memory copy of its "
            f"{n} result file(s); nothing was written"
        )
        yield self._memory

    def unreadable(self) -> list[tuple[str, str]]:
        """``(file name, why)`` of every result file in ``runs/`` that is not in the tables because it
        cannot be read (not JSON, truncated, another schema, a stale write), without writing anything.

        The errors recorded at ingestion (``ingest_log``) for files unchanged since, and the
        pending files (new, or changed since their ingestion) checked now.

        Raises:
            StoreLockedError: the database stayed locked for ``lock_timeout_s``.
        """
        files = result_files(self.runs_dir)
        logged: dict[str, tuple] = {}
        errors: dict[str, str] = {}
        if files and self.db_path.exists():
            con = self._connect(read_only=True, timeout_s=self.lock_timeout_s)
            try:
                logged = read_log(con)
                if logged:
                    errors = read_errors(con)
            finally:
                con.close()
        return unreadable_files(files, logged, errors)

    def _ingest_best_effort(self) -> None:
        try:
            con = self._connect(read_only=False, timeout_s=0.0)
        except StoreLockedError as exc:
            self.last_ingest_skipped = (
                f"new result files were not ingested because the database is busy; "
                f"results may be incomplete. DuckDB: {exc.duckdb_message}"
            )
            return
        try:
            self._ensure_schema(con)
            ingest_into(con, self.runs_dir)
        finally:
            con.close()

    # -- benchmark rows -----------------------------------------------------------------------

    def add_bench_rows(self, rows: list[dict]) -> None:
        """Append rows to table ``bench`` (one transaction).

        Args:
            rows: dicts keyed by bench columns (``db/schema.sql``): bench_id, size and variant
                required; ``extra`` any JSON value; ``created_at`` defaults to now (UTC).

        Raises:
            ValueError: a bad row (the message names ``rows[i]['field']``).
            StoreLockedError: the database stayed locked for ``lock_timeout_s``.
        """
        clean = validate_bench_rows(rows)
        if not clean:
            return
        con = self._connect(read_only=False, timeout_s=self.lock_timeout_s)
        try:
            self._ensure_schema(con)
            con.register("_in_bench", ArrowStream(frame("bench", clean)))
            try:
                con.execute("INSERT INTO bench BY NAME SELECT * FROM _in_bench")
            finally:
                con.unregister("_in_bench")
        finally:
            con.close()
