"""Results store (DESIGN section 5): per-run result files ingested into DuckDB, queried read-only.

Workers write their result with :func:`harness.store.runfile.write_result` (an atomic file write, no
database lock, standard library only); readers call :meth:`Store.query`, which ingests
pending files first. Schema: ``db/schema.sql``; result-file format and validation:
:mod:`harness.store.validate`. ``Store``, ``StoreLockedError`` and ``DB_NAME`` load :mod:`harness.store.store` (and
so DuckDB and polars) on first use, so that importing :mod:`harness.store.runfile` or :mod:`harness.store.validate`
does not (DESIGN section 11: training imports no results store until it writes).
"""

from harness.common.terms import RUN_ROLES as ROLES
from harness.common.terms import STATUSES
from harness.store.runfile import RUNS_DIRNAME
from harness.store.validate import FORMAT_VERSION, SITES, SPLITS, validate_result

_FROM_STORE = ("DB_NAME", "Store", "StoreLockedError")


def __getattr__(name: str):
    """``db.Store`` and the other names of :mod:`harness.store.store`, imported on first access."""
    if name not in _FROM_STORE:
        raise AttributeError(f"module 'harness.store' has no attribute {name!r}")
    import harness.store.store  # lazy: DuckDB and polars load only when the database is used, not for a run file

    return getattr(harness.store.store, name)


__all__ = [
    "DB_NAME",
    "FORMAT_VERSION",
    "ROLES",
    "RUNS_DIRNAME",
    "SITES",
    "SPLITS",
    "STATUSES",
    "Store",
    "StoreLockedError",
    "validate_result",
]
