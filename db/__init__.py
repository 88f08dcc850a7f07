"""Results store (DESIGN section 5): per-run result files ingested into DuckDB, queried read-only.

Workers write their result with :func:`db.runfile.write_result` (an atomic file write, no
database lock, standard library only); readers call :meth:`Store.query`, which ingests
pending files first. Schema: ``db/schema.sql``; result-file format and validation:
:mod:`db.validate`. ``Store``, ``StoreLockedError`` and ``DB_NAME`` load :mod:`db.store` (and
so DuckDB and polars) on first use, so that importing :mod:`db.runfile` or :mod:`db.validate`
does not (DESIGN section 11: training imports no results store until it writes).
"""

from db.runfile import RUNS_DIRNAME
from db.validate import FORMAT_VERSION, SITES, SPLITS, validate_result
from harness.common.terms import RUN_ROLES as ROLES
from harness.common.terms import STATUSES

_FROM_STORE = ("DB_NAME", "Store", "StoreLockedError")


def __getattr__(name: str):
    """``db.Store`` and the other names of :mod:`db.store`, imported on first access."""
    if name not in _FROM_STORE:
        raise AttributeError(f"module 'db' has no attribute {name!r}")
    import db.store  # lazy: DuckDB and polars load only when the database is used, not for a run file

    return getattr(db.store, name)


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
