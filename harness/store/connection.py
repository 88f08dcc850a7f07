"""Opening the results database: short-lived connections with lock retries, a new database made
whole before it has its name, its schema kept current, and its file kept in the storage format
the DuckDB CLIs users have can read.

Locks. DuckDB lets one process at a time open a database file read-write, and that holder also
blocks every read-only opener in other processes. Every connection is short-lived (open, work,
close). A blocked open is retried with jittered exponential backoff for up to ``timeout_s``
seconds, then :class:`StoreLockedError` names the process holding the lock. A read-only
connection that runs user SQL has file access disabled, so a query can neither change results
nor read or write other files. A new database is made whole under a temporary name and then
linked into place, so no process ever opens a half-made file.

Readable by the DuckDB CLI users have. The file is written in DuckDB's storage format
:data:`STORAGE_VERSION` (``v1.4.0``: read by DuckDB 1.4 and 1.5, the CLIs installed today, as
well as by this package's DuckDB 2.0, which would otherwise write a format those cannot
open: "version number 69, but we can only read versions between 64 and 68"). A database
written in a newer format by an earlier harness is rewritten once, at its next ingest (its
next write connection), under the exclusive write lock (``COPY FROM DATABASE`` into a new file, then an
atomic rename), with a message saying so.
"""

from __future__ import annotations

import datetime as dt
import os
import random
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path

import duckdb

from harness.common.files import fsync_dir, fsync_file
from harness.store.validate import DEFAULTS, columns, schema_sha256, schema_sql

#: DuckDB storage format of the results database (see the module docstring).
STORAGE_VERSION = "v1.4.0"


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


def _version(tag: str) -> tuple[int, ...]:
    """``'v1.4.0+'`` -> ``(1, 4, 0)``; unparsable parts count as 0."""
    return tuple(int(p) if p.isdigit() else 0 for p in tag.strip().lstrip("v").rstrip("+").split("."))


def storage_version(con: duckdb.DuckDBPyConnection) -> str:
    """The storage format of ``con``'s database, as DuckDB tags it (e.g. ``'v1.4.0+'``)."""
    row = con.execute(
        "SELECT tags['storage_version'] FROM duckdb_databases() WHERE database_name = current_database()"
    ).fetchone()
    return str(row[0]) if row and row[0] else ""


def _is_lock_error(exc: BaseException) -> bool:
    # "lock" as a word: DuckDB's other IO errors speak of "blocks"
    return isinstance(exc, duckdb.IOException) and re.search(r"\block\b", str(exc).lower()) is not None


# DuckDB's words for a file that is not (or no longer) a whole database: empty, overwritten, truncated.
_DAMAGE_WORDS = (
    "not a valid duckdb database file",
    "could not read enough bytes",
    "checksum",
    "corrupt",
    "magic bytes",
)


def _is_damage(exc: BaseException) -> bool:
    """Whether opening failed because the file is not a whole DuckDB database (empty,
    random bytes, truncated), not because of a lock, permissions or a full disk."""
    if _is_lock_error(exc) or not isinstance(exc, duckdb.Error):
        return False
    if isinstance(exc, (duckdb.SerializationException, duckdb.InternalException)):
        return True
    text = str(exc).lower()
    return isinstance(exc, duckdb.IOException) and any(w in text for w in _DAMAGE_WORDS)


HEADER_BYTES = 3 * 4096  # DuckDB's file header and its two database headers, before the first block


def _probe(con: duckdb.DuckDBPyConnection, db_path: Path) -> None:
    """Read enough of a just-opened database to tell a truncated file: its used blocks must fit in
    the file, and its catalog (``meta``) must be readable. DuckDB opens some truncated files and
    fails only at the first read of a missing block.

    Raises:
        duckdb.IOException: the file is shorter than its used blocks (DuckDB's words for it), or
            DuckDB's own error reading the catalog.
    """
    row = con.execute(
        "SELECT block_size, used_blocks FROM pragma_database_size() WHERE database_name = current_database()"
    ).fetchone()
    if row is not None:
        need = HEADER_BYTES + int(row[0]) * int(row[1])
        have = os.path.getsize(db_path)
        if have < need:
            raise duckdb.IOException(
                f"Could not read enough bytes from file {str(db_path)!r}: it has {have} bytes, "
                f"its {row[1]} used storage units need {need}"
            )
    try:
        con.execute("SELECT count(*) FROM meta").fetchall()
    except duckdb.CatalogException:
        pass  # a database made before its schema: nothing to read yet


def set_aside(db_path: Path, why: BaseException, inode: int | None = None) -> Path | None:
    """Rename a database that cannot be opened to ``NAME.damaged-<UTC time>`` (its WAL too),
    and say so in one line on stderr; the caller then makes a new one, which ingestion fills
    from the result files (the database is a cache of ``runs/*.json``).

    ``inode``: the file that failed to open; if ``db_path`` is another file by now (another
    process already set it aside and made a new one) nothing is renamed. Returns the new
    name, or ``None`` when nothing was renamed.

    Raises:
        OSError: the rename failed (a read-only folder): the message says the database is damaged.
    """
    try:
        if inode is not None and os.stat(db_path).st_ino != inode:
            return None
    except FileNotFoundError:
        return None
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S.%fZ")
    aside = db_path.with_name(f"{db_path.name}.damaged-{stamp}")
    first = str(why).strip().splitlines()[0] if str(why).strip() else type(why).__name__
    try:
        os.rename(db_path, aside)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise OSError(
            exc.errno,
            f"results database {db_path} cannot be opened as a database ({first}) and "
            f"cannot be moved aside ({exc.strerror}); remove it and the next command rebuilds it "
            "from the result files",
        ) from None
    wal = db_path.with_name(db_path.name + ".wal")
    if wal.exists():
        os.rename(wal, aside.with_name(aside.name + ".wal"))
    fsync_dir(db_path.parent)
    print(
        f"harness: results database {db_path} cannot be opened as a database ({first}); moved it aside to "
        f"{aside.name}; a new one is built from the result files {db_path.parent / 'runs'}/*.json",
        file=sys.stderr,
    )
    return aside


def _quote(path: os.PathLike | str) -> str:
    """A path inside a single-quoted SQL string literal."""
    return str(path).replace("'", "''")


def _tmp_name(db_path: Path) -> Path:
    """A hidden temporary file beside ``db_path``, unique to this process and call."""
    return db_path.with_name(f".{db_path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")


def ensure_schema(con: duckdb.DuckDBPyConnection) -> None:
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
                    if (table, column) in DEFAULTS:  # rows ingested before the column: as their files read
                        con.execute(f'UPDATE "{table}" SET "{column}" = ?', [DEFAULTS[table, column]])
        con.execute(schema_sql())
        con.execute("INSERT OR REPLACE INTO meta VALUES ('schema_sha256', ?)", [want])
        con.commit()
    except BaseException:
        con.rollback()
        raise


def create(db_path: Path, init: Callable[[duckdb.DuckDBPyConnection], None] = ensure_schema) -> None:
    """Make the database file, schema included (``init`` applies it), under a temporary name,
    then give it its name with ``os.link`` (atomic, and never replaces: when processes race,
    the first wins).

    DuckDB writes a new file's header after creating it; another process opening the
    file in between fails ("not a valid DuckDB database file"), so the file must not
    appear under its name before it is whole.
    """
    db_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _tmp_name(db_path)
    try:
        con = duckdb.connect(str(tmp), config={"storage_compatibility_version": STORAGE_VERSION})
        try:
            init(con)
        finally:
            con.close()
        try:
            os.link(tmp, db_path)
        except FileExistsError:
            pass  # another process made it first: theirs is as good
        except OSError:  # a file system without hard links: rename, unless one appeared meanwhile
            if not db_path.exists():
                os.replace(tmp, db_path)
    finally:
        tmp.unlink(missing_ok=True)
        tmp.with_name(tmp.name + ".wal").unlink(missing_ok=True)


def connect(
    db_path: Path,
    *,
    read_only: bool,
    timeout_s: float,
    files: bool = False,
    init: Callable[[duckdb.DuckDBPyConnection], None] = ensure_schema,
) -> duckdb.DuckDBPyConnection:
    """Open the database, retrying while another process holds the lock.

    ``files``: a read-only connection that may write files (our own ``COPY ... TO``; never
    one that runs user SQL). A write connection to a database not yet made makes it first
    (:func:`create`, with ``init``), and one to a database in a newer storage format
    rewrites it (:func:`in_storage_version`).

    A file that cannot be opened as a database (empty, random bytes, truncated) is moved
    aside (:func:`set_aside`) and a new, empty one made in its place: ingestion refills it
    from the result files.

    Raises:
        StoreLockedError: still locked after ``timeout_s`` seconds (0: one try).
        OSError: the database is damaged and cannot be moved aside (a read-only folder).
    """
    if read_only and files:
        config = {}
    elif read_only:
        # The user's SQL runs here: no file system access, and it cannot be re-enabled.
        config = {"enable_external_access": False, "lock_configuration": True}
    else:
        if not db_path.exists():
            create(db_path, init)
        config = {}
    start = time.monotonic()
    delay = 0.02
    set_aside_once = False
    while True:
        try:
            inode = os.stat(db_path).st_ino
        except FileNotFoundError:
            inode = None
        try:
            con = duckdb.connect(str(db_path), read_only=read_only, config=config)
            try:
                _probe(con, db_path)
            except BaseException:
                con.close()
                raise
            return con if read_only else in_storage_version(con, db_path)
        except duckdb.Error as exc:
            if _is_damage(exc) and inode is not None and not set_aside_once:
                set_aside_once = True
                set_aside(db_path, exc, inode)
                if not db_path.exists():
                    create(db_path, init)
                continue
            if not _is_lock_error(exc):
                raise
            waited = time.monotonic() - start
            if waited >= timeout_s:
                raise StoreLockedError(db_path, waited, str(exc)) from None
            time.sleep(min(delay * (0.5 + random.random()), timeout_s - waited))
            delay = min(2 * delay, 0.5)


def in_storage_version(con: duckdb.DuckDBPyConnection, db_path: Path) -> duckdb.DuckDBPyConnection:
    """``con`` (a write connection to ``db_path``), after rewriting its database in
    :data:`STORAGE_VERSION` if it is in a newer format; then a connection to the rewritten file.

    Holding the write connection holds DuckDB's exclusive lock, so no other process has the
    file open while it is copied and renamed over; a process that opens it next opens the
    new file. The copy is checkpointed whole before the rename: nothing is half-written.
    """
    have = storage_version(con)
    if not have or _version(have) <= _version(STORAGE_VERSION):
        return con
    tmp = _tmp_name(db_path)
    try:
        con.execute("CHECKPOINT")
        con.execute(f"ATTACH '{_quote(tmp)}' AS _rewrite (STORAGE_VERSION '{STORAGE_VERSION}')")
        name = con.execute("SELECT current_database()").fetchone()[0]
        con.execute(f'COPY FROM DATABASE "{name}" TO _rewrite')
        con.execute("DETACH _rewrite")
        fsync_file(tmp)
        os.replace(tmp, db_path)
        fsync_dir(db_path.parent)
    except BaseException:
        con.close()
        tmp.unlink(missing_ok=True)
        raise
    finally:
        tmp.with_name(tmp.name + ".wal").unlink(missing_ok=True)
    con.close()
    print(
        f"harness: rewrote {db_path} in DuckDB storage format {STORAGE_VERSION} (it was {have}), "
        "so that the DuckDB 1.4 and 1.5 CLIs can open it; nothing in it changed",
        file=sys.stderr,
    )
    return duckdb.connect(str(db_path))
