"""Result-file format and its validation (DESIGN section 5).

A finished run is one JSON file, ``RESULTS/runs/<quoted run_id>.json``, written by
:meth:`harness.store.store.Store.write_result`::

    {
      "format_version": 1,
      "written_at": "2026-01-01T12:00:00.123456",      # UTC, set by the writer
      "run": {"run_id": "...", "grid": "...", "variant": "rd_attnres", "role": "treatment",
              "seed": 0, "size": "tiny", "budget_tokens": 1000000, "status": "done",
              "config": {...}, ...},                   # columns of table `runs`
      "metrics": [{"step": 10, "tokens": 40960, "split": "val", "name": "nll", "value": 5.1}, ...],
      "routing": [{"tokens": 40960, "layer": 0, "site": "attn", "route": "qk", "source": 0,
                   "weight": 0.5, "entropy": 0.69, "eff_depth": 0.5, "js_qk_v": 0.01}, ...],
      "route_pairs": [{"tokens": 40960, "layer": 1, "site": "attn", "route_a": "qk",
                       "route_b": "dup", "query_max_abs_diff": 0.02, "js": 0.001}, ...],
      "route_params": [{"tokens": 40960, "layer": 1, "site": "attn", "name": "w_dup",
                        "numel": 256, "max_abs_change": 0.03}, ...]
    }

Keys of ``run`` rows and of the row lists are the column names of the tables of the same
names (``runs`` for ``run``) in ``db/schema.sql`` (which this module reads, so a column added
there is accepted here at once); a list row may omit ``run_id`` or repeat the run's own.
Required: ``run`` keys run_id, grid, variant, role, seed, size, budget_tokens, status;
every metrics key; routing keys tokens, layer, site, route, source, weight; route_pairs keys
tokens, layer, site, route_a, route_b; route_params keys tokens, layer, site, name. The row
lists may be absent (a failed run; a result written before route_pairs/route_params
existed). Allowed values: role in :data:`ROLES` (the grid roles and ``tune``, DESIGN 9), status
in :data:`STATUSES` (``pruned`` for a tuning trial its pruner stopped), split in
:data:`SPLITS`, site in :data:`SITES`. Types follow the column:
INTEGER/BIGINT take Python ints (not bools, not floats), DOUBLE takes ints or floats (NaN and
infinities allowed; the file then uses Python's ``NaN``/``Infinity`` JSON extension), TIMESTAMP
takes a ``datetime`` or an ISO 8601 string (an aware time is converted to UTC; stored naive
UTC), JSON takes any JSON-serialisable value (``config`` is normally a dict). Optional columns
may be None or absent; ``run`` key ``hardware`` then reads as ``unknown`` (:data:`DEFAULTS`: a run
written before its environment was recorded). Durations (``wall_s`` and its phases ``train_s``, ``eval_s``,
``setup_s``, ``ckpt_s``) are finite and >= 0, and the phases add up to at most ``wall_s``.
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import json
import math
import numbers
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

from harness.common.terms import RUN_ROLES as ROLES
from harness.common.terms import STATUSES, UNKNOWN

FORMAT_VERSION = 1
SPLITS = ("train", "val")
SITES = ("attn", "mlp", "out")

REQUIRED = {
    "runs": ("run_id", "grid", "variant", "role", "seed", "size", "budget_tokens", "status"),
    "metrics": ("step", "tokens", "split", "name", "value"),
    "routing": ("tokens", "layer", "site", "route", "source", "weight"),
    "route_pairs": ("tokens", "layer", "site", "route_a", "route_b"),
    "route_params": ("tokens", "layer", "site", "name"),
    "bench": ("bench_id", "size", "variant"),
}
ALLOWED_VALUES = {
    ("runs", "role"): ROLES,
    ("runs", "status"): STATUSES,
    ("metrics", "split"): SPLITS,
    ("routing", "site"): SITES,
    ("route_pairs", "site"): SITES,
    ("route_params", "site"): SITES,
}
# Values of columns a result file written before the column existed reads as (never NULL, never an error):
# a run written before the environment record ran on hardware nobody recorded (DESIGN section 13).
DEFAULTS = {("runs", "hardware"): UNKNOWN}
# runs columns in seconds: the whole run, then its phases (harness/train/timing.py)
DURATIONS = ("wall_s", "train_s", "eval_s", "setup_s", "ckpt_s")
ROW_TABLES = ("metrics", "routing", "route_pairs", "route_params")  # per-run row lists of a result
TOP_LEVEL_KEYS = ("format_version", "written_at", "run", *ROW_TABLES)

SCHEMA_PATH = Path(__file__).with_name("schema.sql")

_INT_RANGE = {"INTEGER": 2**31, "BIGINT": 2**63}
# The column types db/schema.sql uses (and :func:`_checker` validates).
SCHEMA_TYPES = ("VARCHAR", "INTEGER", "BIGINT", "DOUBLE", "BOOLEAN", "TIMESTAMP", "JSON")


@functools.cache
def schema_sql() -> str:
    """Text of ``db/schema.sql``."""
    return SCHEMA_PATH.read_text(encoding="utf-8")


@functools.cache
def schema_sha256() -> str:
    """sha256 of ``db/schema.sql``; the store re-applies the schema when it changes."""
    return hashlib.sha256(schema_sql().encode("utf-8")).hexdigest()


@functools.cache
def columns() -> dict[str, dict[str, str]]:
    """Column names and DuckDB types of every table in ``db/schema.sql``, in table order.

    Returns:
        ``{table: {column: duckdb_type}}``, e.g. ``columns()["runs"]["seed"] == "INTEGER"``.
        Read from the ``CREATE TABLE`` statements' column lines (``name TYPE ...``, one per
        line, ``--`` comments dropped) with the standard library, so that writing a result file
        needs no DuckDB (DESIGN section 11: training writes results without the store's
        packages); tests/tooling/test_import_boundary.py checks it equals DuckDB's own catalog.

    Raises:
        ValueError: a column line whose type is not one of :data:`SCHEMA_TYPES` (a schema
            construct this reader does not know: extend it, and the check above).
    """
    text = "\n".join(line.split("--", 1)[0].rstrip() for line in schema_sql().splitlines())
    out: dict[str, dict[str, str]] = {}
    for table, body in re.findall(r"CREATE TABLE IF NOT EXISTS (\w+) \((.*?)\n\);", text, re.S):
        for line in filter(None, (line.strip().rstrip(",") for line in body.splitlines())):
            name, dtype = line.split()[:2]
            if dtype.upper() not in SCHEMA_TYPES:
                raise ValueError(f"db/schema.sql, table {table}: cannot read column line {line!r}")
            out.setdefault(table, {})[name] = dtype.upper()
    return out


def result_filename(run_id: str) -> str:
    """File name of a run's result file: the run_id percent-quoted (so any id is a safe,
    distinct name) plus ``.json``; ids too long for a file name are shortened with a hash."""
    name = quote(run_id, safe="-_.=+,@")
    if name.startswith("."):  # never a hidden file
        name = "%2E" + name[1:]
    if len(name) > 200:
        name = name[:150] + "-" + hashlib.sha256(run_id.encode("utf-8")).hexdigest()[:32]
    return name + ".json"


# -- value checks ----------------------------------------------------------------------------


class _Bad(Exception):
    """A value check failed; ``args[0]`` completes the sentence ``<field> ...``."""


def _type_error(value: Any, wanted: str) -> _Bad:
    return _Bad(f"= {value!r} ({type(value).__name__}) must be {wanted}")


def _utc_naive(value: Any) -> str:
    if isinstance(value, str):
        try:
            value = dt.datetime.fromisoformat(value)
        except ValueError:
            raise _Bad(f"= {value!r} is not an ISO 8601 timestamp") from None
    if not isinstance(value, dt.datetime):
        raise _type_error(value, "a datetime or an ISO 8601 string")
    if value.tzinfo is not None:
        value = value.astimezone(dt.UTC).replace(tzinfo=None)
    return value.isoformat()


def _checker(dtype: str) -> Callable[[Any], Any]:
    """A function ``value -> normalised value`` for a non-null value of ``dtype``; raises
    :class:`_Bad`. Exact-type fast paths first: routing lists can hold ~1e5 rows."""
    if dtype == "VARCHAR":

        def check(v: Any) -> Any:
            if type(v) is str or isinstance(v, str):
                return str(v)
            raise _type_error(v, "a string")

    elif dtype in _INT_RANGE:
        bound = _INT_RANGE[dtype]

        def check(v: Any) -> Any:
            if type(v) is not int:
                if isinstance(v, bool) or not isinstance(v, numbers.Integral):
                    raise _type_error(v, f"an integer ({dtype})")
                v = int(v)  # e.g. numpy.int64
            if not -bound <= v < bound:
                raise _Bad(f"= {v} is out of range for {dtype}")
            return v

    elif dtype == "DOUBLE":

        def check(v: Any) -> Any:
            if type(v) is float:
                return v
            if isinstance(v, bool) or not isinstance(v, numbers.Real):
                raise _type_error(v, "a number")
            return float(v)

    elif dtype == "BOOLEAN":

        def check(v: Any) -> Any:
            if not isinstance(v, bool):
                raise _type_error(v, "true or false")
            return v

    elif dtype == "TIMESTAMP":
        check = _utc_naive
    elif dtype == "JSON":

        def check(v: Any) -> Any:
            try:  # strict JSON: DuckDB's JSON type rejects NaN/Infinity
                json.dumps(v, allow_nan=False)
            except (TypeError, ValueError) as exc:
                raise _Bad(f"is not JSON-serialisable: {exc}") from None
            return v

    else:  # a type added to schema.sql that this module does not know yet
        raise NotImplementedError(f"no validator for DuckDB type {dtype}")
    return check


@functools.cache
def _checkers(table: str) -> dict[str, Callable[[Any], Any]]:
    return {name: _checker(dtype) for name, dtype in columns()[table].items()}


def validate_row(table: str, row: Any, where: str, *, run_id: str | None = None) -> dict[str, Any]:
    """Check one row meant for ``table`` and return it normalised (all columns present).

    Args:
        table: ``runs``, one of :data:`ROW_TABLES`, or ``bench``.
        row: mapping of column name to value.
        where: how to name the row in error messages, e.g. ``"result['metrics'][3]"``.
        run_id: for metrics/routing rows, the run's id; the row's own ``run_id`` key, if
            given, must equal it, and the returned row carries it.

    Raises:
        ValueError: not a mapping, an unknown key, a missing required key, a value of the
            wrong type or outside its allowed set; the message names the field.
    """
    if not isinstance(row, Mapping):
        raise ValueError(f"{where} must be a dict, got {type(row).__name__}")
    checkers = _checkers(table)
    unknown = [k for k in row if k not in checkers]
    if unknown:
        raise ValueError(f"{where}: unknown key {unknown[0]!r}; allowed keys: {', '.join(checkers)}")
    out: dict[str, Any] = {}
    if run_id is not None:
        given = row.get("run_id", run_id)
        if given != run_id:
            raise ValueError(f"{where}['run_id'] = {given!r} differs from the run's {run_id!r}")
        out["run_id"] = run_id
    required = REQUIRED[table]
    for name, check in checkers.items():
        if name in out:
            continue
        value = row.get(name)
        if value is None:
            value = DEFAULTS.get((table, name))
        if value is None:
            if name in required:
                what = "is None" if name in row else "is missing"
                raise ValueError(f"{where}: required key {name!r} {what}")
            out[name] = None
            continue
        try:
            value = check(value)
        except _Bad as bad:
            raise ValueError(f"{where}[{name!r}] {bad}") from None
        allowed = ALLOWED_VALUES.get((table, name))
        if allowed is not None and value not in allowed:
            raise ValueError(f"{where}[{name!r}] = {value!r} is not allowed; allowed: {', '.join(allowed)}")
        out[name] = value
    return out


def _validate_rows(table: str, rows: Any, where: str, run_id: str) -> list[dict[str, Any]]:
    if rows is None:
        return []
    if isinstance(rows, (str, bytes, Mapping)) or not isinstance(rows, Sequence):
        raise ValueError(f"{where} must be a list of dicts, got {type(rows).__name__}")
    return [validate_row(table, r, f"{where}[{i}]", run_id=run_id) for i, r in enumerate(rows)]


def validate_result(result: Any) -> dict[str, Any]:
    """Check a run's result dict and return a normalised copy (the form written to disk).

    Args:
        result: ``{"run": {...}, "metrics": [...], "routing": [...], "route_pairs": [...],
            "route_params": [...]}`` as described in this module's docstring;
            ``format_version``/``written_at`` are optional.

    Returns:
        A new dict with every key of :data:`TOP_LEVEL_KEYS` except ``written_at`` (kept if
        given): rows carry every column of their table (absent ones as None), ints/floats
        converted to Python types, timestamps as naive-UTC ISO strings.

    Raises:
        ValueError: the message names the bad field (e.g. ``result['run']['status']``) and,
            for a value outside its set, lists the allowed values.
    """
    if not isinstance(result, Mapping):
        raise ValueError(f"a result must be a dict, got {type(result).__name__}")
    unknown = [k for k in result if k not in TOP_LEVEL_KEYS]
    if unknown:
        raise ValueError(f"result: unknown key {unknown[0]!r}; allowed keys: {', '.join(TOP_LEVEL_KEYS)}")
    version = result.get("format_version", FORMAT_VERSION)
    if version != FORMAT_VERSION:
        raise ValueError(
            f"result['format_version'] = {version!r} is not supported; this code reads "
            f"version {FORMAT_VERSION}"
        )
    if "run" not in result:
        raise ValueError("result: missing required key 'run'")
    run = validate_row("runs", result["run"], "result['run']")
    run_id = run["run_id"]
    if not run_id:
        raise ValueError("result['run']['run_id'] must be a non-empty string")
    out: dict[str, Any] = {"format_version": FORMAT_VERSION}
    if result.get("written_at") is not None:
        try:
            out["written_at"] = _utc_naive(result["written_at"])
        except _Bad as bad:
            raise ValueError(f"result['written_at'] {bad}") from None
    _check_durations(run)
    out["run"] = run
    for table in ROW_TABLES:
        out[table] = _validate_rows(table, result.get(table), f"result[{table!r}]", run_id)
    return out


def _check_durations(run: dict[str, Any]) -> None:
    """The run's durations (seconds) are finite and >= 0, and its phases fit in ``wall_s``."""
    for name in DURATIONS:
        value = run.get(name)
        if value is not None and not (math.isfinite(value) and value >= 0):
            raise ValueError(f"result['run'][{name!r}] = {value!r} must be a finite number of seconds >= 0")
    phases = [run[name] for name in DURATIONS[1:] if run.get(name) is not None]
    wall = run.get("wall_s")
    if wall is not None and sum(phases) > wall * (1 + 1e-9) + 1e-6:
        raise ValueError(
            f"result['run']: train_s + eval_s + setup_s + ckpt_s = {sum(phases):.6g} s exceeds "
            f"wall_s = {wall:.6g} s (the phases are parts of the run's wall time)"
        )


def validate_bench_rows(rows: Any) -> list[dict[str, Any]]:
    """Check rows for table ``bench``; ``created_at`` defaults to now (UTC).

    Raises:
        ValueError: as :func:`validate_row`, naming ``rows[i]['field']``.
    """
    if isinstance(rows, (str, bytes, Mapping)) or not isinstance(rows, Sequence):
        raise ValueError(f"bench rows must be a list of dicts, got {type(rows).__name__}")
    now = dt.datetime.now(dt.UTC).replace(tzinfo=None).isoformat()
    out = []
    for i, row in enumerate(rows):
        checked = validate_row("bench", row, f"rows[{i}]")
        if checked["created_at"] is None:
            checked["created_at"] = now
        out.append(checked)
    return out
