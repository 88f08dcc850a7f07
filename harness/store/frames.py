"""Polars <-> DuckDB conversion: rows go in as polars frames and results come out as polars frames.

DuckDB scans a frame through the Arrow PyCapsule interface (:class:`ArrowStream`; no pyarrow
needed), never row by row; :func:`frame` builds the frame of one table's rows with exactly its
columns and types (``db/schema.sql``), and :func:`to_polars` turns a query's relation back into
a frame.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Iterator
from typing import Any

import duckdb
import polars as pl

from harness.store.validate import columns

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


class ArrowStream:
    """A polars frame seen only through the Arrow PyCapsule interface, so DuckDB scans it
    without pyarrow (DuckDB's own polars path imports pyarrow). Each scan gets a fresh stream."""

    __slots__ = ("frame",)

    def __init__(self, frame: pl.DataFrame):
        self.frame = frame

    def __arrow_c_stream__(self, requested_schema: object = None) -> object:
        return self.frame.__arrow_c_stream__(requested_schema)


def polars_schema(table: str) -> dict[str, pl.DataType]:
    """The polars types of ``table``'s columns (``db/schema.sql``), in column order."""
    return {name: _POLARS_TYPES[dtype] for name, dtype in columns()[table].items()}


def frame(table: str, rows: list[dict[str, Any]]) -> pl.DataFrame:
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
    return pl.from_dicts(rows, schema=polars_schema(table))


def to_polars(rel: duckdb.DuckDBPyRelation) -> pl.DataFrame:
    """A DuckDB relation -> polars frame; duplicate column names get DuckDB's ``_1`` suffixes
    and types polars cannot import become text."""
    return pl.DataFrame(polars_ready(rel))


def to_polars_batches(rel: duckdb.DuckDBPyRelation, rows: int) -> Iterator[pl.DataFrame]:
    """:func:`to_polars` in frames of at most ``rows`` rows, streamed: only one batch is in memory at a
    time. An empty result gives one empty frame with the result's columns."""
    reader = polars_ready(rel).to_arrow_reader(rows)
    empty = True
    for batch in reader:
        empty = False
        yield pl.from_arrow(batch)
    if empty:
        yield pl.from_arrow(reader.schema.empty_table())


def polars_ready(rel: duckdb.DuckDBPyRelation) -> duckdb.DuckDBPyRelation:
    """``rel`` with duplicate column names suffixed ``_1``, ``_2`` and types polars cannot import as text."""
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
    return rel
