"""Where the run queue lives (``--storage``), and riding out a storage that is briefly away.

Storage: by default a journal file ``RESULTS/queue.journal`` (Optuna's
``JournalFileBackend`` with ``JournalFileOpenLock``, an O_EXCL lock file that works on
NFSv3+ shared filesystems, thinly wrapped by :mod:`harness.scheduling.queue.journal` to survive
a torn write and to name a corrupt line); ``journal:PATH`` or a path ending in ``.journal`` for a
journal elsewhere; ``postgresql://...`` for an RDB server (psycopg 3, the ``postgres``
extra; ``postgresql+psycopg2://...`` for psycopg2). SQLite is refused: with several
processes Optuna's SQLite storage hands one enqueued trial to two workers.

An unreachable storage (a PostgreSQL server restarting, a shared filesystem gone for a
moment) is retried with exponential backoff for a bounded time, quietly unless it lasts
(``--verbose`` shows every retry), then the caller gets one line naming the storage (:func:`retry_storage`, :class:`StorageUnavailable`); the queue
itself lives in the storage, so nothing is lost, and a worker started once it is back
takes up the runs (a run left RUNNING by a stopped worker is reclaimed).

Optuna and SQLAlchemy are imported only when a storage is opened or an error is judged,
so the retry settings here can be read without loading them (``harness --help``).
"""

from __future__ import annotations

import errno
import hashlib
import importlib.util
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.common import console

if TYPE_CHECKING:
    from optuna.storages import BaseStorage

JOURNAL_NAME = "queue.journal"
SQLITE_REFUSED = (
    "sqlite storage is refused for the run queue: with several worker processes Optuna's "
    "SQLite storage hands the same enqueued trial to two workers (about 1 in 4 with 8 "
    "workers). Use the default journal file (RESULTS/queue.journal), journal:/shared/path.journal "
    "for workers on several machines sharing a filesystem, or postgresql://USER:PASS@HOST/DB"
)
# SQLAlchemy driver name -> (module to import, what to pip install). Which driver a URL uses
# is SQLAlchemy's call: a plain postgresql:// is psycopg 3 with the pinned SQLAlchemy 2.1.
_POSTGRES_DRIVERS = {
    "psycopg": ("psycopg", "'rd-harness[postgres]' (psycopg 3)"),
    "psycopg2": ("psycopg2", "psycopg2-binary"),
    "pg8000": ("pg8000", "pg8000"),
}
# File-system errors that waiting does not cure (a read-only or full disk, no permission, a file
# where a folder should be): reported at once instead of retried as an outage.
_LASTING_ERRNOS = frozenset(
    {
        errno.EACCES,
        errno.EPERM,
        errno.EROFS,
        errno.ENOSPC,
        errno.EDQUOT,
        errno.ENOTDIR,
        errno.EISDIR,
        errno.EEXIST,
        errno.ENAMETOOLONG,
    }
)
STORAGE_RETRY_S = 60.0  # a worker retries an unreachable storage this long (seconds), then stops
COMMAND_RETRY_S = 10.0  # `harness queue` / `harness status` give up sooner (someone is waiting)
RETRY_FIRST_S, RETRY_MAX_S = 0.5, 10.0  # backoff: first wait, doubled up to this (seconds)
NOTICE_AFTER_S = 10.0  # an outage this long (seconds) is said without --verbose; shorter ones are not news


def parse_storage(url: str | None, results: str | os.PathLike) -> tuple[str, str]:
    """Classify a ``--storage`` value: ``("journal", path)`` or ``("rdb", url)``.

    ``None`` means the default journal ``results/queue.journal``.

    Raises:
        ValueError: an ``sqlite:`` URL (see :data:`SQLITE_REFUSED`) or anything else not
            understood; the message lists the accepted forms.
    """
    if url is None:
        return "journal", str(Path(results) / JOURNAL_NAME)
    if url.startswith("sqlite"):
        raise ValueError(f"--storage {url}: {SQLITE_REFUSED}")
    if url.startswith("journal:"):
        path = url[len("journal:") :]
        if not path:
            raise ValueError("--storage journal: needs a file path, e.g. journal:/shared/queue.journal")
        return "journal", path
    if url.startswith("postgresql:") or url.startswith("postgresql+"):
        return "rdb", url
    if "://" not in url and url.endswith(".journal"):
        return "journal", url
    raise ValueError(
        f"--storage {url!r} not understood; allowed: postgresql://USER:PASS@HOST/DB, "
        "journal:/shared/path/queue.journal, or a file path ending in .journal "
        "(default: RESULTS/queue.journal; sqlite is refused, see --help)"
    )


class NoQueue(FileNotFoundError):
    """There is no queue journal to open (``create=False``): an answer, not an outage."""


SCHEMA_ATTEMPTS = 5  # opens of a PostgreSQL storage while another process creates Optuna's schema


def open_storage(url: str | None, results: str | os.PathLike, *, create: bool = True) -> BaseStorage:
    """Open the queue's Optuna storage (see :func:`parse_storage` for the accepted forms).

    Raises:
        ValueError: unaccepted URL, or a PostgreSQL URL whose driver is not installed.
        NoQueue: ``create=False`` and the journal file does not exist.
    """
    kind, where = parse_storage(url, results)
    if kind == "rdb":
        module, install = postgres_driver(where)
        if importlib.util.find_spec(module) is None:
            raise ValueError(
                f"--storage {where.split(':', 1)[0]}://...: the PostgreSQL driver {module!r} is not "
                f"installed; install it with: pip install {install}"
            )
        return _open_rdb(where)
    from harness.scheduling.queue.journal import (
        QueueJournalStorage,  # lazy: Optuna loads when a storage is used
    )

    path = Path(where)
    if not path.exists():
        if not create:
            raise NoQueue(f"no queue journal at {path}")
        path.parent.mkdir(parents=True, exist_ok=True)
    return QueueJournalStorage(str(path))


def _open_rdb(url: str, attempts: int = SCHEMA_ATTEMPTS) -> BaseStorage:
    """Optuna's RDB storage on ``url``. Opening it creates Optuna's schema when missing, and two
    processes doing that at once collide (a duplicate type or table, or a second version row:
    ``IntegrityError``/``ProgrammingError``); the loser opens it again once the winner is done.
    Our leases replace Optuna's heartbeat (which only runs inside ``Study.optimize``)."""
    from optuna.storages import RDBStorage  # lazy: Optuna loads when a storage is used
    from sqlalchemy.exc import IntegrityError, ProgrammingError

    for attempt in range(1, attempts):
        try:
            return RDBStorage(url, engine_kwargs={"pool_pre_ping": True})
        except (IntegrityError, ProgrammingError):
            time.sleep(0.2 * attempt)
    return RDBStorage(url, engine_kwargs={"pool_pre_ping": True})  # the last attempt raises what it meets


@contextmanager
def trial_lock(storage: BaseStorage, trial_id: int) -> Iterator[None]:
    """Hold off every change of trial ``trial_id``'s state for a block, as tightly as the storage allows.

    Journal file: the journal's lock (no process appends while it is held, so no one can
    finish or reclaim the trial). PostgreSQL: ``SELECT ... FOR UPDATE`` on the trial's row in
    a transaction open for the block (Optuna's ``set_trial_state_values`` locks the same row).
    Other storages: no lock.

    Keep the block short (a rename): a journal lock held 30 s is broken by other writers.
    """
    from harness.scheduling.queue.journal import (
        QueueJournalStorage,  # lazy: Optuna loads when a storage is used
    )

    if isinstance(storage, QueueJournalStorage):
        with storage.journal.lock.held():
            yield
        return
    engine = getattr(storage, "engine", None)
    if engine is None or engine.dialect.name != "postgresql":
        yield
        return
    import sqlalchemy  # lazy: SQLAlchemy, only on PostgreSQL

    with engine.connect() as conn, conn.begin():
        conn.execute(
            sqlalchemy.text("SELECT state FROM trials WHERE trial_id = :t FOR UPDATE"), {"t": trial_id}
        )
        yield


GRID_LOCK_GRACE_S = 60  # a grid lock file untouched this long (seconds) is a dead `harness queue`'s: broken


@contextmanager
def grid_lock(storage: BaseStorage, grid: str) -> Iterator[Callable[[], None]]:
    """Hold ``grid``'s lock for a block across processes and machines sharing the storage: the
    reading of a grid's runs and the adding of its missing ones (``harness queue``) then happen
    as one step, so two concurrent queues add each run once.

    Journal file: an ``O_EXCL`` lock file beside the journal, ``JOURNAL.grid-<sha1 of grid>.lock``
    (Optuna's ``JournalFileOpenLock``, as the journal's own lock: NFSv3+); one left by a killed
    process is broken after :data:`GRID_LOCK_GRACE_S` seconds without a touch. PostgreSQL: a
    session advisory lock on the grid's name (released with the connection). Other storages: none.

    Yields:
        ``keep_alive()``: call it now and then in a long block (it touches the lock file).
    """
    # lazy: Optuna loads when a storage is used
    from harness.scheduling.queue.journal import LOCK_SUFFIX, QueueJournalStorage

    if isinstance(storage, QueueJournalStorage):
        from optuna.storages.journal import JournalFileOpenLock  # lazy: Optuna, only with a queue

        name = f"{storage.journal.path}.grid-{hashlib.sha1(grid.encode()).hexdigest()[:12]}"
        lock = JournalFileOpenLock(name, grace_period=GRID_LOCK_GRACE_S)
        lock.acquire()
        try:
            yield lambda: os.utime(name + LOCK_SUFFIX)
        finally:
            lock.release()
        return
    engine = getattr(storage, "engine", None)
    if engine is None or engine.dialect.name != "postgresql":
        yield lambda: None
        return
    import sqlalchemy  # lazy: SQLAlchemy, only on PostgreSQL

    key = {"k": f"harness queue grid {grid}"}
    with engine.connect() as conn:
        conn.execute(sqlalchemy.text("SELECT pg_advisory_lock(hashtextextended(:k, 0))"), key)
        conn.commit()
        try:
            yield lambda: None
        finally:
            conn.execute(sqlalchemy.text("SELECT pg_advisory_unlock(hashtextextended(:k, 0))"), key)
            conn.commit()


def postgres_driver(url: str) -> tuple[str, str]:
    """``(module, pip package)`` of the DBAPI driver SQLAlchemy uses for a ``postgresql`` URL.

    Raises:
        ValueError: a driver SQLAlchemy does not know, or one Optuna cannot use (async).
    """
    import sqlalchemy  # lazy: SQLAlchemy, only on PostgreSQL

    scheme = url.split(":", 1)[0]
    try:
        driver = sqlalchemy.engine.make_url(url).get_dialect().driver
    except (sqlalchemy.exc.ArgumentError, sqlalchemy.exc.NoSuchModuleError):
        driver = scheme.partition("+")[2]
    if driver not in _POSTGRES_DRIVERS:
        raise ValueError(
            f"--storage {scheme}://...: driver {driver!r} not supported; use postgresql:// "
            f"(psycopg 3) or postgresql+psycopg2://"
        )
    return _POSTGRES_DRIVERS[driver]


class StorageUnavailable(ConnectionError):
    """The queue storage stayed unreachable through every retry of :func:`retry_storage`.

    The message is one line: the storage (no password), the tries, the seconds spent and
    the last error's first line.
    """


def _unreachable(exc: BaseException) -> bool:
    """Whether ``exc`` means the storage could not be reached (worth retrying), not a bad request.

    RDB: a lost or refused connection (SQLAlchemy ``OperationalError``/``InterfaceError``,
    also when Optuna wraps it in ``StorageInternalError``). Journal: an ``OSError`` of the
    file system (a shared folder gone for a moment), except :class:`NoQueue`, an inner
    :class:`StorageUnavailable` (its retries are spent) and errors waiting does not cure
    (no permission, a read-only or full disk, a file where a folder should be).
    """
    # An SQLAlchemy error exists only in a process that imported SQLAlchemy (PostgreSQL): a journal's error
    # is classified without importing it (0.9 s of CPU, paid before by every command's first missing queue).
    sa_exc = sys.modules.get("sqlalchemy.exc")
    lost = (sa_exc.OperationalError, sa_exc.InterfaceError) if sa_exc is not None else ()
    seen = exc
    while seen is not None:
        if isinstance(seen, lost):
            return True
        if isinstance(seen, OSError) and not isinstance(seen, (NoQueue, StorageUnavailable)):
            return seen.errno not in _LASTING_ERRNOS
        seen = seen.__cause__
    return False


def _first_line(exc: BaseException) -> str:
    from optuna.exceptions import StorageInternalError  # lazy: Optuna, only with a queue

    root = exc.__cause__ if isinstance(exc, StorageInternalError) and exc.__cause__ else exc
    text = str(root).strip().splitlines()
    return f"{type(root).__name__}: {text[0] if text else ''}".strip()


def retry_storage(
    fn: Callable[[], Any], *, where: str, retry_s: float = STORAGE_RETRY_S, log: Callable[[str], None] = print
) -> Any:
    """``fn()``, called again while it fails because the storage is unreachable.

    Waits 0.5 s, then doubles the wait up to 10 s (:data:`RETRY_FIRST_S`,
    :data:`RETRY_MAX_S`), for at most ``retry_s`` seconds in all. A retry that succeeds is
    no news: each one is a debug message (``--verbose``, :mod:`harness.common.console`); only an
    outage of :data:`NOTICE_AFTER_S` seconds or more is said through ``log``, once, and
    again when the storage answers. Other errors propagate at once.

    Raises:
        StorageUnavailable: still unreachable after ``retry_s`` seconds.
    """
    t0 = time.monotonic()
    wait, tries, noticed = RETRY_FIRST_S, 0, False
    while True:
        tries += 1
        try:
            result = fn()
        except Exception as exc:
            if not _unreachable(exc):
                raise
            spent = time.monotonic() - t0
            if spent + wait > retry_s:
                raise StorageUnavailable(
                    f"queue storage {where} unreachable: gave up after {tries} tries in {spent:.0f} s "
                    f"(last error: {_first_line(exc)})"
                ) from None
            console.log.debug(
                f"queue storage {where} unreachable ({_first_line(exc)}); retry {tries} in {wait:g} s"
            )
            if not noticed and spent >= NOTICE_AFTER_S:
                log(
                    f"queue storage {where} unreachable for {spent:.0f} s ({_first_line(exc)}); "
                    f"still retrying, for up to {retry_s:g} s in all"
                )
                noticed = True
            time.sleep(wait)
            wait = min(2 * wait, RETRY_MAX_S)
        else:
            if noticed:
                log(f"queue storage {where} reachable again after {time.monotonic() - t0:.0f} s")
            return result


def describe_storage(url: str | None, results: str | os.PathLike) -> str:
    """Short human description of where the queue lives (passwords hidden)."""
    kind, where = parse_storage(url, results)
    if kind == "journal":
        return where
    scheme, rest = where.split("://", 1)
    return f"{scheme}://{rest.rsplit('@', 1)[-1]}"


__all__ = [
    "JOURNAL_NAME",
    "SQLITE_REFUSED",
    "STORAGE_RETRY_S",
    "COMMAND_RETRY_S",
    "RETRY_FIRST_S",
    "RETRY_MAX_S",
    "NOTICE_AFTER_S",
    "parse_storage",
    "NoQueue",
    "open_storage",
    "trial_lock",
    "postgres_driver",
    "StorageUnavailable",
    "retry_storage",
    "describe_storage",
]
