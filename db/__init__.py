"""Results store (DESIGN section 5): per-run result files ingested into DuckDB, queried read-only.

Workers call :meth:`Store.write_result` (an atomic file write, no database lock); readers call
:meth:`Store.query`, which ingests pending files first. Schema: ``db/schema.sql``; result-file
format and validation: :mod:`db.validate`.
"""

from db.store import DB_NAME, RUNS_DIRNAME, Store, StoreLockedError
from db.validate import FORMAT_VERSION, ROLES, SITES, SPLITS, STATUSES, validate_result

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
