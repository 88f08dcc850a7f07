"""Results store (DESIGN section 5): per-run result files ingested into DuckDB, queried read-only.

Workers write their result with :func:`harness.store.runfile.write_result` (an atomic file write, no
database lock, standard library only); readers call :meth:`Store.query`, which ingests pending files
first. ``Store``, ``StoreLockedError`` and ``DB_NAME`` load :mod:`harness.store.store` (and so DuckDB
and polars) on first use, so that importing :mod:`harness.store.runfile` or :mod:`harness.store.validate`
does not (DESIGN section 11: training imports no results store until it writes).

* :mod:`harness.store.runfile` -- a run's result file (``RESULTS/runs/<run_id>.json``): where it lives,
  writing, reading;
* :mod:`harness.store.validate` -- the result-file format and its validation;
* :mod:`harness.store.store` -- :class:`~harness.store.store.Store`: the DuckDB store, files first,
  read-only SQL, exports;
* :mod:`harness.store.connection` -- opening the database: short-lived connections with lock retries, a
  new database made whole before it has its name, its schema and storage format kept current;
* :mod:`harness.store.ingest` -- new or changed result files copied into the run tables, idempotently;
* :mod:`harness.store.frames` -- polars frames in and out of DuckDB;
* :mod:`harness.store.archive` -- a grid's results as one portable file, written and read back checked
  (``harness archive`` / ``harness import``, docs/sharing.md).

``schema.sql`` beside these modules is ``db/schema.sql`` as installed (the tables and their columns).
"""

from harness.store.runfile import RUNS_DIRNAME
from harness.store.validate import FORMAT_VERSION, SITES, SPLITS, validate_result

_FROM_STORE = ("DB_NAME", "Store", "StoreLockedError")


def __getattr__(name: str):
    """``harness.store.Store`` and the other names of :mod:`harness.store.store`, imported on first access."""
    if name not in _FROM_STORE:
        raise AttributeError(f"module 'harness.store' has no attribute {name!r}")
    import harness.store.store  # lazy: DuckDB and polars load only when the database is used, not for a run file

    return getattr(harness.store.store, name)


__all__ = [
    "DB_NAME",
    "FORMAT_VERSION",
    "RUNS_DIRNAME",
    "SITES",
    "SPLITS",
    "Store",
    "StoreLockedError",
    "validate_result",
]
