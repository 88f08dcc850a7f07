"""The DuckDB results store (DESIGN section 5): per-run files, idempotent ingestion, read-only SQL.

Why files first. DuckDB lets one process at a time open a database file read-write, and that
holder also blocks every read-only opener in other processes. So a worker never opens the
database: it writes each finished run to its own file ``RESULTS/runs/<run_id>.json``
(format: :mod:`db.validate`) atomically (:func:`harness.files.atomic_write`: a tmp file in the
same folder, fsync, ``os.replace``, fsync of the folder), which cannot fail on a lock and never
leaves a half-written file under a name ingestion reads (it reads ``*.json`` only; tmp files
end in ``.tmp``).

Ingestion (:meth:`Store.ingest`, also run before each :meth:`Store.query`) copies new or changed
files into ``RESULTS/harness.duckdb``. A file is pending when its (size, mtime_ns, inode) differ
from what table ``ingest_log`` recorded. A run's rows are replaced in one transaction (delete its
``runs`` row and its rows in ``metrics``, ``routing``, ``route_pairs`` and ``route_params``,
insert the file's), so ingesting twice leaves identical tables, and a newer file for a run_id
(a retried run) replaces the old rows, except a file stamped with an older fencing epoch than
the stored row's (a write by a worker whose run was taken over, :mod:`harness.fencing`): it is
kept out and logged as a stale write. Rows go in as polars frames scanned by DuckDB through
the Arrow PyCapsule interface (no pyarrow needed), never row-by-row. A file that fails to
parse or validate is skipped with a warning and its error is kept in ``ingest_log.error``
(it is retried when the file changes). The run files are the
source of truth: deleting ``harness.duckdb`` loses nothing but ``bench`` rows, and the next
ingest rebuilds the run tables.

Locks. Every connection is short-lived (open, work, close). A blocked open is retried with
jittered exponential backoff for up to ``lock_timeout_s`` seconds, then :class:`StoreLockedError`
names the process holding the lock. :meth:`Store.query` ingests best effort (one try; if the
database is busy it queries what is there and records why in ``last_ingest_skipped``) and runs
the user's SQL on a read-only connection with file access disabled, so a query can neither
change results nor read or write other files. A new database is made whole under a temporary
name and then linked into place, so no process ever opens a half-made file.

Readable by the DuckDB CLI users have. The file is written in DuckDB's storage format
:data:`STORAGE_VERSION` (``v1.4.0``: read by DuckDB 1.4 and 1.5, the CLIs installed today, as
well as by this package's DuckDB 2.0, which would otherwise write a format those cannot
open: "version number 69, but we can only read versions between 64 and 68"). A database
written in a newer format by an earlier harness is rewritten once, at its next ingest,
under the exclusive write lock (``COPY FROM DATABASE`` into a new file, then an atomic
rename), with a message saying so. :meth:`Store.export` writes a table of one grid to
Parquet or CSV (``COPY ... TO`` on our own connection; user SQL may not write files).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import random
import re
import sys
import time
import warnings
from pathlib import Path
from typing import Any, NamedTuple

import duckdb
import polars as pl

from db.validate import (
    ROW_TABLES,
    columns,
    result_filename,
    schema_sha256,
    schema_sql,
    validate_bench_rows,
    validate_result,
)
from harness.files import atomic_path, atomic_write, fsync_dir, fsync_file
from harness.terms import EXPORT_FORMATS, EXPORT_TABLES, check_grid

DB_NAME = "harness.duckdb"
#: DuckDB storage format of the results database (see the module docstring).
STORAGE_VERSION = "v1.4.0"

RUNS_DIRNAME = "runs"
DEFAULT_LOCK_TIMEOUT_S = 10.0

# Ingest in transactions of at most this many files / per-run rows (metrics, routing, ...): bounds memory and
# lock hold time while keeping per-commit overhead small.
_BATCH_FILES = 256
_BATCH_ROWS = 500_000

_POLARS_TYPES = {
    "VARCHAR": pl.String,
    "INTEGER": pl.Int32,
    "BIGINT": pl.Int64,
    "DOUBLE": pl.Float64,
    "BOOLEAN": pl.Boolean,
    "TIMESTAMP": pl.Datetime("us"),
    "JSON": pl.String,
}
# DuckDB types polars cannot import from Arrow (INTERVAL/UNION panic inside polars) are sent as text.
_AS_TEXT = re.compile(r"\b(INTERVAL|UNION|BIGNUM|BIT)\b")


class StoreLockedError(TimeoutError):
    """The results database stayed locked by another process for ``lock_timeout_s`` seconds.

    Attributes:
        db_path: the database file.
        waited_s: seconds spent retrying.
        holder_pid: PID of the process holding the lock, parsed from DuckDB's message (None if
            DuckDB did not say).
        duckdb_message: DuckDB's error text (it names the holder's executable and PID).
    """

    def __init__(self, db_path: Path, waited_s: float, duckdb_message: str):
        self.db_path = db_path
        self.waited_s = waited_s
        self.duckdb_message = duckdb_message
        match = re.search(r"PID (\d+)", duckdb_message)
        self.holder_pid = int(match.group(1)) if match else None
        holder = f" (PID {self.holder_pid})" if self.holder_pid is not None else ""
        super().__init__(
            f"results database {db_path} is locked by another process{holder}; gave up after "
            f"{waited_s:.1f} s. DuckDB: {duckdb_message}"
        )


class _ArrowStream:
    """A polars frame seen only through the Arrow PyCapsule interface, so DuckDB scans it
    without pyarrow (DuckDB's own polars path imports pyarrow). Each scan gets a fresh stream."""

    __slots__ = ("frame",)

    def __init__(self, frame: pl.DataFrame):
        self.frame = frame

    def __arrow_c_stream__(self, requested_schema: object = None) -> object:
        return self.frame.__arrow_c_stream__(requested_schema)


class _Loaded(NamedTuple):
    path: Path
    stat: os.stat_result
    result: dict[str, Any] | None  # validated result, None if unreadable/invalid
    error: str | None


def _signature(st: os.stat_result) -> tuple[int, int, int]:
    # os.replace always installs a new inode, so a rewrite changes the signature even when
    # size and (coarse) mtime happen to match.
    return (st.st_size, st.st_mtime_ns, st.st_ino)


def _version(tag: str) -> tuple[int, ...]:
    """``'v1.4.0+'`` -> ``(1, 4, 0)``; unparsable parts count as 0."""
    return tuple(int(p) if p.isdigit() else 0 for p in tag.strip().lstrip("v").rstrip("+").split("."))


def storage_version(con: duckdb.DuckDBPyConnection) -> str:
    """The storage format of ``con``'s database, as DuckDB tags it (e.g. ``'v1.4.0+'``)."""
    row = con.execute("SELECT tags['storage_version'] FROM duckdb_databases() "
                      "WHERE database_name = current_database()").fetchone()
    return str(row[0]) if row and row[0] else ""


def _is_lock_error(exc: BaseException) -> bool:
    return isinstance(exc, duckdb.IOException) and "lock" in str(exc).lower()


def _quote(path: os.PathLike | str) -> str:
    """A path inside a single-quoted SQL string literal."""
    return str(path).replace("'", "''")


def _polars_schema(table: str) -> dict[str, pl.DataType]:
    return {name: _POLARS_TYPES[dtype] for name, dtype in columns()[table].items()}


def _frame(table: str, rows: list[dict[str, Any]]) -> pl.DataFrame:
    """Validated rows -> a frame with exactly ``table``'s columns and types."""
    types = columns()[table]
    json_cols = [c for c, t in types.items() if t == "JSON"]
    time_cols = [c for c, t in types.items() if t == "TIMESTAMP"]
    if json_cols or time_cols:  # only runs/bench: one row per run, cheap
        rows = [dict(r) for r in rows]
        for r in rows:
            for c in json_cols:
                if r[c] is not None:
                    r[c] = json.dumps(r[c], allow_nan=False)
            for c in time_cols:
                if r[c] is not None:
                    r[c] = dt.datetime.fromisoformat(r[c])
    return pl.from_dicts(rows, schema=_polars_schema(table))


def _to_polars(rel: duckdb.DuckDBPyRelation) -> pl.DataFrame:
    """A DuckDB relation -> polars frame; duplicate column names get DuckDB's ``_1`` suffixes
    and types polars cannot import become text."""
    names = list(rel.columns)
    types = [str(t) for t in rel.types]
    seen: dict[str, int] = {}
    unique = []
    for name in names:
        n = seen.get(name, 0)
        seen[name] = n + 1
        unique.append(name if n == 0 else f"{name}_{n}")
    if unique != names or any(_AS_TEXT.search(t) for t in types):
        items = []
        for i, (name, dtype) in enumerate(zip(unique, types), start=1):
            expr = f"#{i}::VARCHAR" if _AS_TEXT.search(dtype) else f"#{i}"
            items.append(expr + ' AS "' + name.replace('"', '""') + '"')
        rel = rel.query("_q", f"SELECT {', '.join(items)} FROM _q")
    return pl.DataFrame(rel)


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
        """Where the result file of ``run_id`` lives (see :func:`db.validate.result_filename`)."""
        return self.runs_dir / result_filename(run_id)

    def write_result(self, result: dict, *, commit=None) -> Path:
        """Validate a finished run and write it atomically to its own file; no database access.

        Args:
            result: ``{"run": {...}, "metrics": [...], "routing": [...], ...}``; the format and the
                rules are in :mod:`db.validate`. ``written_at`` (UTC now) is added.
            commit: the final rename happens inside ``with commit():`` (a worker's lease held,
                :mod:`harness.fencing`); if entering it raises, no file is written.

        Returns:
            The file path, ``runs_dir / result_filename(run_id)``. Writing the same run_id again
            replaces the file (and, at the next ingest, the run's rows).

        Raises:
            ValueError: invalid result; the message names the field.
            LeaseLost: from ``commit``: the writer no longer holds the run.
        """
        clean = validate_result(result)
        clean["written_at"] = dt.datetime.now(dt.timezone.utc).replace(tzinfo=None).isoformat()
        # NaN/inf metric values are kept (Python's JSON extension); strict JSON would lose them.
        data = json.dumps(clean, separators=(",", ":")).encode("utf-8")
        return atomic_write(self.result_path(clean["run"]["run_id"]), data, commit=commit)

    def read_result(self, path: str | os.PathLike) -> dict:
        """Read and validate one result file.

        Raises:
            FileNotFoundError: no such file.
            ValueError: not JSON, or not a valid result (the message names the field).
        """
        text = Path(path).read_bytes()
        try:
            raw = json.loads(text)
        except ValueError as exc:
            raise ValueError(f"{path} is not valid JSON: {exc}") from None
        return validate_result(raw)

    def run_end(self, run_id: str) -> dict | None:
        """How run ``run_id`` ended, from its result file: ``{"status", "val_nll", "error"}``,
        or ``None`` without a readable result file of that run.

        ``val_nll`` (nats/token) is read as the ``final`` view reads it: the validation NLL
        at the largest ``tokens`` (ties: the largest step); ``None`` without one.
        """
        try:
            result = self.read_result(self.result_path(run_id))
        except (OSError, ValueError):
            return None
        run = result["run"]
        if run.get("run_id") != run_id:
            return None
        val = [m for m in result.get("metrics") or () if m["split"] == "val" and m["name"] == "nll"]
        last = max(val, key=lambda m: (m["tokens"], m["step"]), default=None)
        return {"status": run["status"], "val_nll": None if last is None else last["value"], "error": run.get("error")}

    def _result_files(self) -> list[tuple[Path, os.stat_result]]:
        """``*.json`` in runs_dir (hidden and tmp files excluded), oldest first."""
        if not self.runs_dir.is_dir():
            return []
        out = []
        for entry in os.scandir(self.runs_dir):
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

    # -- database connections -----------------------------------------------------------------

    def _connect(self, *, read_only: bool, timeout_s: float, files: bool = False) -> duckdb.DuckDBPyConnection:
        """Open the database, retrying while another process holds the lock.

        ``files``: a read-only connection that may write files (our own ``COPY ... TO``; never
        one that runs user SQL).

        Raises:
            StoreLockedError: still locked after ``timeout_s`` seconds (0: one try).
        """
        if read_only and files:
            config = {}
        elif read_only:
            # The user's SQL runs here: no file system access, and it cannot be re-enabled.
            config = {"enable_external_access": False, "lock_configuration": True}
        else:
            if not self.db_path.exists():
                self._create()
            config = {}
        start = time.monotonic()
        delay = 0.02
        while True:
            try:
                con = duckdb.connect(str(self.db_path), read_only=read_only, config=config)
                return con if read_only else self._in_storage_version(con)
            except duckdb.IOException as exc:
                if not _is_lock_error(exc):
                    raise
                waited = time.monotonic() - start
                if waited >= timeout_s:
                    raise StoreLockedError(self.db_path, waited, str(exc)) from None
                time.sleep(min(delay * (0.5 + random.random()), timeout_s - waited))
                delay = min(2 * delay, 0.5)

    def _in_storage_version(self, con: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyConnection:
        """``con`` (a write connection), after rewriting its database in :data:`STORAGE_VERSION`
        if it is in a newer format; then a connection to the rewritten file.

        Holding the write connection holds DuckDB's exclusive lock, so no other process has the
        file open while it is copied and renamed over; a process that opens it next opens the
        new file. The copy is checkpointed whole before the rename: nothing is half-written.
        """
        have = storage_version(con)
        if not have or _version(have) <= _version(STORAGE_VERSION):
            return con
        tmp = self.db_path.with_name(f".{self.db_path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
        try:
            con.execute("CHECKPOINT")
            con.execute(f"ATTACH '{_quote(tmp)}' AS _rewrite (STORAGE_VERSION '{STORAGE_VERSION}')")
            name = con.execute("SELECT current_database()").fetchone()[0]
            con.execute(f'COPY FROM DATABASE "{name}" TO _rewrite')
            con.execute("DETACH _rewrite")
            fsync_file(tmp)
            os.replace(tmp, self.db_path)
            fsync_dir(self.db_path.parent)
        except BaseException:
            con.close()
            tmp.unlink(missing_ok=True)
            raise
        finally:
            tmp.with_name(tmp.name + ".wal").unlink(missing_ok=True)
        con.close()
        print(f"harness: rewrote {self.db_path} in DuckDB storage format {STORAGE_VERSION} (it was {have}), "
              "so that the DuckDB 1.4 and 1.5 CLIs can open it; nothing in it changed", file=sys.stderr)
        return duckdb.connect(str(self.db_path))

    def _create(self) -> None:
        """Make the database file, schema included, under a temporary name, then give it its
        name with ``os.link`` (atomic, and never replaces: when processes race, the first wins).

        DuckDB writes a new file's header after creating it; another process opening the
        file in between fails ("not a valid DuckDB database file"), so the file must not
        appear under its name before it is whole.
        """
        self.db_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.db_path.with_name(f".{self.db_path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
        try:
            con = duckdb.connect(str(tmp), config={"storage_compatibility_version": STORAGE_VERSION})
            try:
                self._ensure_schema(con)
            finally:
                con.close()
            try:
                os.link(tmp, self.db_path)
            except FileExistsError:
                pass  # another process made it first: theirs is as good
            except OSError:  # a file system without hard links: rename, unless one appeared meanwhile
                if not self.db_path.exists():
                    os.replace(tmp, self.db_path)
        finally:
            tmp.unlink(missing_ok=True)
            tmp.with_name(tmp.name + ".wal").unlink(missing_ok=True)

    def _ensure_schema(self, con: duckdb.DuckDBPyConnection) -> None:
        """Apply db/schema.sql if the database was made with another version of it.

        Columns that schema.sql has and an existing table lacks are added first (ALTER TABLE),
        which is how "add columns freely" reaches old databases.
        """
        want = schema_sha256()
        try:
            rows = con.execute("SELECT value FROM meta WHERE key = 'schema_sha256'").fetchall()
            row = rows[0] if rows else None  # fetchall: an open result blocks later writes
        except duckdb.CatalogException:
            row = None
        if row is not None and row[0] == want:
            return
        con.begin()
        try:
            have: dict[str, set[str]] = {}
            for table, column in con.execute(
                "SELECT c.table_name, c.column_name FROM duckdb_columns() c "
                "JOIN duckdb_tables() t ON t.table_oid = c.table_oid "
                "WHERE t.database_name = current_database() AND t.schema_name = 'main'"
            ).fetchall():
                have.setdefault(table, set()).add(column)
            for table, cols in columns().items():
                if table not in have:
                    continue
                for column, dtype in cols.items():
                    if column not in have[table]:
                        # identifiers come from schema.sql, never from user input
                        con.execute(f'ALTER TABLE "{table}" ADD COLUMN "{column}" {dtype}')
            con.execute(schema_sql())
            con.execute("INSERT OR REPLACE INTO meta VALUES ('schema_sha256', ?)", [want])
            con.commit()
        except BaseException:
            con.rollback()
            raise

    @staticmethod
    def _logged(con: duckdb.DuckDBPyConnection) -> dict[str, tuple[int, int, int]]:
        try:
            rows = con.execute("SELECT file, size_bytes, mtime_ns, inode FROM ingest_log").fetchall()
        except duckdb.CatalogException:  # database made before any ingest
            return {}
        return {file: (size, mtime, inode) for file, size, mtime, inode in rows}

    # -- ingestion ----------------------------------------------------------------------------

    def pending(self) -> list[Path]:
        """Result files not yet ingested, or changed since they were (oldest first).

        Raises:
            StoreLockedError: the database stayed locked for ``lock_timeout_s``.
        """
        files = self._result_files()
        if not files or not self.db_path.exists():
            return [p for p, _ in files]
        con = self._connect(read_only=True, timeout_s=self.lock_timeout_s)
        try:
            logged = self._logged(con)
        finally:
            con.close()
        return [p for p, st in files if logged.get(p.name) != _signature(st)]

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
            return self._ingest_with(con)
        finally:
            con.close()

    def _ingest_with(self, con: duckdb.DuckDBPyConnection) -> int:
        logged = self._logged(con)
        todo = [p for p, st in self._result_files() if logged.get(p.name) != _signature(st)]
        count = 0
        batch: list[_Loaded] = []
        batch_rows = 0
        for path in todo:
            loaded = self._load(path)
            if loaded is None:
                continue
            batch.append(loaded)
            if loaded.result is not None:
                batch_rows += sum(len(loaded.result[t]) for t in ROW_TABLES)
            if len(batch) >= _BATCH_FILES or batch_rows >= _BATCH_ROWS:
                count += self._commit(con, batch)
                batch, batch_rows = [], 0
        if batch:
            count += self._commit(con, batch)
        return count

    @staticmethod
    def _load(path: Path) -> _Loaded | None:
        try:
            with open(path, "rb") as f:
                # stat the open file so the recorded signature belongs to the bytes read
                st = os.fstat(f.fileno())
                data = f.read()
        except FileNotFoundError:  # deleted since listing
            return None
        try:
            return _Loaded(path, st, validate_result(json.loads(data)), None)
        except ValueError as exc:  # includes JSONDecodeError and UnicodeDecodeError
            why = str(exc)
            if isinstance(exc, json.JSONDecodeError):
                why = f"not valid JSON: {exc.msg} (char {exc.pos}; the file has {len(data)} bytes): truncated or damaged"
            elif isinstance(exc, UnicodeDecodeError):
                why = f"not UTF-8 text (byte {exc.start} of {len(data)}): damaged"
            warnings.warn(f"skipping result file {path}: {why}", stacklevel=3)
            return _Loaded(path, st, None, why)

    @staticmethod
    def _stale(con: duckdb.DuckDBPyConnection, latest: dict[str, dict[str, Any]]) -> dict[str, str]:
        """``{run_id: why}`` of results stamped with an older fencing epoch than the run's stored row."""
        stamped = [rid for rid, r in latest.items() if r["run"].get("epoch") is not None]
        if not stamped:
            return {}
        rows = con.execute("SELECT run_id, epoch, owner FROM runs WHERE epoch IS NOT NULL AND list_contains(?, run_id)",
                           [stamped]).fetchall()
        out = {}
        for rid, epoch, owner in rows:
            new = latest[rid]["run"]
            if new["epoch"] < epoch:
                out[rid] = (f"stale write: epoch {new['epoch']} by {new.get('owner')}, written after the run was "
                            f"taken over; the store keeps epoch {epoch} by {owner}")
        return out

    @staticmethod
    def _commit(con: duckdb.DuckDBPyConnection, batch: list[_Loaded]) -> int:
        """Replace the rows of every run in ``batch`` in one transaction; returns files ingested."""
        latest: dict[str, dict[str, Any]] = {}
        for item in batch:  # oldest first, so the newest file of a run_id wins
            if item.result is not None:
                latest[item.result["run"]["run_id"]] = item.result
        stale = Store._stale(con, latest)
        if stale:  # kept out, and logged with why (harness.fencing: a write by a worker whose run was taken over)
            batch = [i._replace(result=None, error=stale[i.result["run"]["run_id"]])
                     if i.result is not None and i.result["run"]["run_id"] in stale else i for i in batch]
            latest = {rid: r for rid, r in latest.items() if rid not in stale}
        results = list(latest.values())
        now = dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)
        frames = {
            "_in_runs": _frame("runs", [r["run"] for r in results]),
            **{f"_in_{t}": _frame(t, [x for r in results for x in r[t]]) for t in ROW_TABLES},
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
                schema=_polars_schema("ingest_log"),
            ),
        }
        for name, frame in frames.items():
            con.register(name, _ArrowStream(frame))
        try:
            con.begin()
            try:
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

    # -- queries ------------------------------------------------------------------------------

    def query(self, sql: str, params: list | None = None, *, ingest: bool = True) -> pl.DataFrame:
        """Run SQL on a read-only connection and return the result as a polars frame.

        Pending result files are ingested first, best effort: if another process holds the
        database (even a reader blocks a writer), ingestion is skipped, ``last_ingest_skipped``
        says why, and the query sees what is there. In a folder this process cannot write
        (a read-only mount) nothing is ingested or created (:meth:`_query_read_only`). On an
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
        if ingest:
            self.last_ingest_skipped = None
            if not self.writable():
                return self._query_read_only(sql, params)
            self._ingest_best_effort()
        elif self._memory is not None:
            return self._run(self._memory, sql, params)
        if not self.db_path.exists():
            con = self._connect(read_only=False, timeout_s=self.lock_timeout_s)
            try:
                self._ensure_schema(con)
            finally:
                con.close()
        con = self._connect(read_only=True, timeout_s=self.lock_timeout_s)
        try:
            return self._run(con, sql, params)
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
            fmt: ``parquet`` or ``csv`` (with a header); JSON columns (``runs.config``) as text.
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
        where = "grid = ?" if table in ("final", "runs") else "run_id IN (SELECT run_id FROM runs WHERE grid = ?)"
        # JSON columns as text: Parquet readers would see DuckDB's JSON as raw bytes
        as_text = [c for c, t in columns().get(table, {}).items() if t == "JSON"]
        star = f"* REPLACE ({', '.join(f'{c}::VARCHAR AS {c}' for c in as_text)})" if as_text else "*"
        con = self._connect(read_only=True, timeout_s=self.lock_timeout_s, files=True)
        try:
            with atomic_path(out) as tmp:
                # table, columns and format come from our lists, never from the user's text
                (rows,) = con.execute(f"COPY (SELECT {star} FROM {table} WHERE {where} ORDER BY ALL) TO ? "
                                      f"(FORMAT {fmt})", [grid, str(tmp)]).fetchone()
        finally:
            con.close()
        return int(rows)

    @staticmethod
    def _run(con: duckdb.DuckDBPyConnection, sql: str, params: list | None) -> pl.DataFrame:
        rel = con.sql(sql, params=params)
        return pl.DataFrame() if rel is None else _to_polars(rel)

    def writable(self) -> bool:
        """Whether this process may write the results folder (and its database): False for a
        read-only mount or someone else's folder. A folder not yet made counts as writable."""
        if not self.results_dir.exists():
            return True
        return os.access(self.results_dir, os.W_OK) and (not self.db_path.exists() or os.access(self.db_path, os.W_OK))

    def _query_read_only(self, sql: str, params: list | None) -> pl.DataFrame:
        """:meth:`query` in a folder this process cannot write: nothing is ingested or created.

        With a database there, the query reads it as it is (result files it lacks are counted
        in ``last_ingest_skipped``); without one, the result files are read into an in-memory
        database (kept for the next ``ingest=False`` queries) and the query runs there.
        """
        where = f"the results folder {self.results_dir} is read-only for this process"
        if self.db_path.exists():
            n = len(self.pending())
            self.last_ingest_skipped = (f"{where}: {n} new result file(s) were not ingested; the tables lack them"
                                        if n else f"{where}: its database was read as it is (nothing to ingest)")
            con = self._connect(read_only=True, timeout_s=self.lock_timeout_s)
            try:
                return self._run(con, sql, params)
            finally:
                con.close()
        if self._memory is None:
            con = duckdb.connect(":memory:")
            self._ensure_schema(con)
            self._ingest_with(con)
            con.execute("SET enable_external_access = false")
            con.execute("SET lock_configuration = true")
            self._memory = con
        n = len(self._result_files())
        self.last_ingest_skipped = (f"{where} and has no database: the query ran on an in-memory copy of its "
                                    f"{n} result file(s); nothing was written")
        return self._run(self._memory, sql, params)

    def unreadable(self) -> list[tuple[str, str]]:
        """``(file name, why)`` of every result file in ``runs/`` that is not in the tables because it
        cannot be read (not JSON, truncated, another schema, a stale write), without writing anything.

        The errors recorded at ingestion (``ingest_log``) for files unchanged since, and the
        pending files (new, or changed since their ingestion) checked now.

        Raises:
            StoreLockedError: the database stayed locked for ``lock_timeout_s``.
        """
        files = self._result_files()
        logged: dict[str, tuple] = {}
        errors: dict[str, str] = {}
        if files and self.db_path.exists():
            con = self._connect(read_only=True, timeout_s=self.lock_timeout_s)
            try:
                logged = self._logged(con)
                if logged:
                    errors = dict(con.execute("SELECT file, error FROM ingest_log WHERE error IS NOT NULL").fetchall())
            finally:
                con.close()
        out = []
        for path, st in files:
            if logged.get(path.name) == _signature(st):
                if path.name in errors:
                    out.append((path.name, errors[path.name]))
                continue
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                loaded = self._load(path)
            if loaded is not None and loaded.error is not None:
                out.append((path.name, loaded.error))
        return sorted(out)

    def _ingest_best_effort(self) -> None:
        try:
            con = self._connect(read_only=False, timeout_s=0.0)
        except StoreLockedError as exc:
            self.last_ingest_skipped = (f"new result files were not ingested because the database is busy; "
                                        f"results may be incomplete. DuckDB: {exc.duckdb_message}")
            return
        try:
            self._ensure_schema(con)
            self._ingest_with(con)
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
            con.register("_in_bench", _ArrowStream(_frame("bench", clean)))
            try:
                con.execute("INSERT INTO bench BY NAME SELECT * FROM _in_bench")
            finally:
                con.unregister("_in_bench")
        finally:
            con.close()
