"""Write one grid's rows of a results table to a Parquet or CSV file, for pandas, R, a notebook.

Tables (DESIGN section 5, columns in db/schema.sql): final (default: one row per done run
with val_nll, val_bpb, val_ppl), runs, metrics, routing, route_pairs, route_params; for
the last four, the rows of the grid's runs. Newly finished runs are ingested first (as
`harness sql`). The file is written by DuckDB's COPY ... TO under a temporary name beside
PATH and renamed onto it, so nothing half-written is ever at PATH; rows are sorted, so the
same results give the same file. (`harness sql` cannot write files: its connection has
file access disabled.)

example:
  harness export --grid rd_controls_small --format parquet --out final.parquet
  harness export --grid rd_controls_small --table metrics --format csv --out metrics.csv
  python -c "import polars as pl; print(pl.read_parquet('final.parquet'))"
  python -c "import pandas as pd; print(pd.read_parquet('final.parquet'))"     # pyarrow is installed
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.common.terms import EXPORT_FORMATS, EXPORT_TABLES

TABLES, FORMATS = ", ".join(EXPORT_TABLES), ", ".join(EXPORT_FORMATS)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--grid", required=True, metavar="NAME", help="grid name (the `name` in its TOML)")
    parser.add_argument("--table", default="final", metavar="TABLE", help=f"one of {TABLES} (default: final)")
    parser.add_argument("--format", required=True, metavar="FORMAT", help=f"one of {FORMATS}")
    parser.add_argument(
        "--out",
        required=True,
        type=Path,
        metavar="PATH",
        help="file to write (replaced atomically if it exists)",
    )
    parser.add_argument(
        "--lock-timeout",
        type=float,
        default=10.0,
        metavar="S",
        help="seconds to keep retrying while another process holds the database (default: 10)",
    )


def main(args: argparse.Namespace) -> int:
    from harness.store.connection import StoreLockedError
    from harness.store.store import Store

    store = Store(args.results, lock_timeout_s=args.lock_timeout)
    try:
        rows = store.export(args.grid, args.table.lower(), args.format.lower(), args.out)
    except StoreLockedError as exc:
        print(f"harness export: error: {exc}", file=sys.stderr)
        return 1
    except (IsADirectoryError, NotADirectoryError, PermissionError) as exc:  # PATH left as it was
        print(f"harness export: error: cannot write {args.out}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    if store.last_ingest_skipped:
        print(
            "harness export: note: new result files were not ingested because the database is busy; "
            f"the file may lack the newest runs. DuckDB: {store.last_ingest_skipped}",
            file=sys.stderr,
        )
    print(f"wrote {rows} rows of {args.table} (grid {args.grid}) to {args.out} ({args.format})")
    return 0
