"""Run SQL on the results database (read-only), after ingesting newly finished runs.

Tables (DESIGN section 5, columns in db/schema.sql): runs (one row per run), metrics (run_id,
step, tokens, split, name, value; val nll is nats/token), routing (depth distributions per
layer/site/route/source), route_pairs and route_params (the degeneracy records: per
evaluation, each pair of a site's routes and each trainable pseudo-query or offset), bench,
ingest_log; view final (one row per done run with val_nll,
val_bpb, val_ppl at its last evaluation). The query runs on a read-only connection with file
access disabled, so it cannot change results or write files (to write a grid's table to a
Parquet or CSV file: harness export); a failing statement prints DuckDB's error and exits
with status 1. The table format shows every column and the first --limit rows (default 10,000;
a note says how many more there are), floats to 6 significant digits; csv and json keep every
digit and every row. Rows are streamed from DuckDB, so a result of millions of rows needs no
more memory than a batch of them. If another process holds the database, new result files are not ingested
this time (a note on stderr says so) and the query waits up to --lock-timeout seconds. In a
results folder this process cannot write (a read-only mount) nothing is ingested or created:
the query reads the database as it is, or, without one, an in-memory copy of the result
files (a note says which). Result files that cannot be read are named on stderr, with why.

example:
  harness sql "select grid, variant, seed, val_nll from final where grid = 'rd_controls_small' order by 2, 3"
  harness sql --format csv "select * from metrics join runs using (run_id)
      where grid = 'rd_controls_small' and split = 'val'" > val.csv
  harness sql --format json "select grid, variant, avg(val_nll) as nll from final group by all"
  echo "select count(*) from runs" | harness sql -
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import warnings

from harness.common.files import full_disk
from harness.common.interrupt import interrupted

FORMATS = ("table", "csv", "json")
TABLE_LIMIT = 10_000  # rows the table format shows by default (--limit)
BATCH_ROWS = 65_536  # rows read from DuckDB at a time
TABLE_DIGITS = 6  # significant digits of a float in the table format
EXPORT_HINT = (
    "harness sql cannot write files (its connection is read-only, file access disabled); "
    "to write a grid's table to a file: harness export --grid NAME [--table final|runs|metrics|routing|"
    "route_pairs|route_params] --format parquet|csv --out PATH"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare ``QUERY``, ``--format``, ``--lock-timeout`` and ``--no-ingest``."""
    parser.add_argument("query", metavar="QUERY", help="SQL text, or - to read it from stdin")
    parser.add_argument(
        "--format",
        choices=FORMATS,
        default="table",
        help="table: every column and the first --limit rows, strings in full; csv: every row, with a header; "
        "json: a list of records, every row (default: table)",
    )
    parser.add_argument(
        "--limit",
        type=int,
        default=TABLE_LIMIT,
        metavar="N",
        help=f"rows the table format shows; a note on stderr says how many more there are "
        f"(0: every row, held in memory; default: {TABLE_LIMIT:,})",
    )
    parser.add_argument(
        "--lock-timeout",
        type=float,
        default=10.0,
        metavar="S",
        help="seconds to keep retrying while another process holds the database (default: 10)",
    )
    parser.add_argument(
        "--no-ingest", action="store_true", help="query without ingesting new result files first"
    )


def format_frame(df, fmt: str, *, header: bool = True) -> str:
    """Render a polars frame as ``table``, ``csv`` or ``json`` text (ending in a newline).

    table: polars' table with all rows and columns and strings in full, floats (also inside
    lists) rounded to :data:`TABLE_DIGITS` significant digits, no shape line.
    csv/json: every digit (shortest round-trip repr); nested values (lists, structs) are
    written as JSON text in csv.

    Raises:
        ValueError: unknown ``fmt``.
    """
    import polars as pl

    if fmt == "table":
        longest = max(
            [df[c].str.len_chars().max() or 0 for c, t in df.schema.items() if t == pl.String],
            default=0,
        )
        floats = (pl.Float32, pl.Float64)
        df = df.with_columns(
            [pl.col(c).round_sig_figs(TABLE_DIGITS) for c, t in df.schema.items() if t in floats]
            + [
                pl.col(c).list.eval(pl.element().round_sig_figs(TABLE_DIGITS))
                for c, t in df.schema.items()
                if isinstance(t, pl.List) and t.inner in floats
            ]
        )
        with pl.Config(
            tbl_rows=-1,
            tbl_cols=-1,
            tbl_width_chars=65535,
            fmt_str_lengths=max(32, longest),
            fmt_table_cell_list_len=-1,
            fmt_float="full",
            tbl_hide_dataframe_shape=True,
        ):
            return f"{df}\n"
    if fmt == "csv":
        nested = [c for c, t in df.schema.items() if t.is_nested()]
        if nested:
            df = df.with_columns(
                pl.Series(
                    c,
                    [None if v is None else json.dumps(v, default=str) for v in df[c].to_list()],
                    dtype=pl.String,
                )
                for c in nested
            )
        return df.write_csv(include_header=header)
    if fmt == "json":
        return df.write_json() + "\n"
    raise ValueError(f"unknown format {fmt!r}; allowed: {', '.join(FORMATS)}")


def main(args: argparse.Namespace) -> int:
    """Ingest pending result files, run the query read-only and print the result.

    Returns:
        0 on success; 1 when DuckDB rejects the statement or the database stays locked.

    Raises:
        ValueError: an empty query.
    """
    import duckdb  # imported here so that `harness --help` stays fast

    from harness.store.connection import StoreLockedError
    from harness.store.store import Store

    sql = sys.stdin.read() if args.query == "-" else args.query
    if not sql.strip():
        raise ValueError("empty query; give SQL text, or - to read it from stdin")
    if args.limit < 0:
        raise ValueError(f"--limit {args.limit}: expected 0 (every row) or more")
    store = Store(args.results, lock_timeout_s=args.lock_timeout)
    try:
        with warnings.catch_warnings():  # unreadable result files are named below, once
            warnings.filterwarnings("ignore", message="skipping result file")
            with store.query_batches(sql, ingest=not args.no_ingest, rows=BATCH_ROWS) as batches:
                if store.last_ingest_skipped:
                    print(f"harness sql: note: {store.last_ingest_skipped}", file=sys.stderr)
                warn_unreadable(store, "harness sql: ")
                more = write_batches(batches, args.format, args.limit, sys.stdout)
    except StoreLockedError as exc:
        print(f"harness sql: error: {exc}", file=sys.stderr)
        return 1
    except duckdb.Error as exc:
        if interrupted():  # the Ctrl-C's own InterruptException (harness.common.interrupt): "interrupted"
            raise KeyboardInterrupt from None
        full = full_disk(args.results)
        print(f"harness sql: error: {full + '; DuckDB: ' if full else ''}{exc}", file=sys.stderr)
        if isinstance(exc, duckdb.PermissionException) and re.search(
            r"\b(copy|export)\b", sql, re.IGNORECASE
        ):
            print(f"harness sql: hint: {EXPORT_HINT}", file=sys.stderr)
        return 1
    if more:
        print(
            f"harness sql: note: {more:,} more rows not shown (--limit {args.limit:,}); use --format csv "
            "for every row, or --limit N",
            file=sys.stderr,
        )
    return 0


def write_batches(batches, fmt: str, limit: int, out) -> int:
    """Write a streamed result (polars frames, :meth:`harness.store.store.Store.query_batches`) to ``out`` as
    ``fmt``, holding one batch at a time; the table format shows the first ``limit`` rows (0: all).

    Returns:
        the number of rows not shown (table format beyond ``limit``; else 0).
    """
    import polars as pl

    if fmt == "table":
        head, shown, more = [], 0, 0
        for df in batches:
            part = df.head(max(limit - shown, 0)) if limit else df
            if not head or len(part):  # the first (maybe empty) frame keeps the columns
                head.append(part)
            shown += len(part)
            more += len(df) - len(part)
        out.write(format_frame(pl.concat(head, how="vertical_relaxed") if len(head) > 1 else head[0], fmt))
        return more
    if fmt == "csv":
        for i, df in enumerate(batches):
            out.write(format_frame(df, fmt, header=i == 0))
        return 0
    if fmt == "json":  # one JSON list, written batch by batch
        out.write("[")
        first = True
        for df in batches:
            body = format_frame(df, fmt).strip()[1:-1]
            if body:
                out.write(body if first else "," + body)
                first = False
        out.write("]\n")
        return 0
    raise ValueError(f"unknown format {fmt!r}; allowed: {', '.join(FORMATS)}")


def warn_unreadable(
    store, prefix: str, *, most: int = 10, file=None, bad: list[tuple[str, str]] | None = None
) -> list[tuple[str, str]]:
    """Name every result file the tables lack because it cannot be read, and why, on ``file``
    (default stderr); returns them. ``bad``: :meth:`harness.store.store.Store.unreadable` already called
    (default: call it; nothing is said when the database is locked). Used by ``harness sql``
    and ``harness status``."""
    from harness.store.connection import StoreLockedError

    file = file or sys.stderr
    if bad is None:
        try:
            bad = store.unreadable()
        except StoreLockedError:
            return []
    if bad:
        print(
            f"{prefix}warning: {len(bad)} result file(s) in {store.runs_dir} are not in the tables: "
            "they cannot be read (fix or remove them; their runs do not count as finished)",
            file=file,
        )
        for name, why in bad[:most]:
            print(f"  {name}: {why}", file=file)
        if len(bad) > most:
            print(f"  ... and {len(bad) - most} more", file=file)
    return bad
