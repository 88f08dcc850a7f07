"""A run's result file, ``RESULTS/runs/<run_id>.json``: where it lives, writing, reading (DESIGN section 5).

The half of the results store a worker needs, in the standard library plus :mod:`harness.store.validate`:
no DuckDB, no polars. Training writes its result here and never opens the database, so a
GPU machine that has only torch and Lightning trains and records runs (DESIGN section 11:
training imports neither the results store nor the statistics until it writes or analyses);
:class:`harness.store.store.Store` reads the same files into DuckDB and keeps its methods
(``result_path``, ``write_result``, ``read_result``, ``run_end``) as calls of these.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path

from harness.common.files import atomic_write
from harness.store.validate import result_filename, validate_result

RUNS_DIRNAME = "runs"


def result_path(results_dir: str | os.PathLike, run_id: str) -> Path:
    """Where the result file of ``run_id`` lives: ``results_dir/runs/`` +
    :func:`harness.store.validate.result_filename`."""
    return Path(results_dir) / RUNS_DIRNAME / result_filename(run_id)


def write_result(results_dir: str | os.PathLike, result: dict, *, commit=None) -> Path:
    """Validate a finished run and write it atomically to its own file; no database access.

    Args:
        results_dir: the results folder (``runs/`` is created on the first write).
        result: ``{"run": {...}, "metrics": [...], "routing": [...], ...}``; the format and the
            rules are in :mod:`harness.store.validate`. ``written_at`` (UTC now) is added.
        commit: the final rename happens inside ``with commit():`` (a worker's lease held,
            :mod:`harness.train.fencing`); if entering it raises, no file is written.

    Returns:
        The file path, :func:`result_path`. Writing the same run_id again replaces the file
        (and, at the next ingest, the run's rows).

    Raises:
        ValueError: invalid result; the message names the field.
        LeaseLost: from ``commit``: the writer no longer holds the run.
    """
    clean = validate_result(result)
    clean["written_at"] = dt.datetime.now(dt.UTC).replace(tzinfo=None).isoformat()
    # NaN/inf metric values are kept (Python's JSON extension); strict JSON would lose them.
    data = json.dumps(clean, separators=(",", ":")).encode("utf-8")
    # a fenced write (a worker's) never re-creates a results folder that went away
    root = results_dir if commit is not None else None
    return atomic_write(result_path(results_dir, clean["run"]["run_id"]), data, commit=commit, root=root)


def read_result(path: str | os.PathLike) -> dict:
    """Read and validate one result file.

    Raises:
        FileNotFoundError: no such file.
        ValueError: not JSON, or not a valid result (the message names the field).
    """
    text = Path(path).read_bytes()
    try:
        raw = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"{path} is not valid JSON: {exc}") from None
    return validate_result(raw)


def result_end(result: dict) -> dict:
    """How the run of a result file's content ended: ``{"status", "val_nll", "error"}``.

    ``val_nll`` (nats/token) is read as the ``final`` view reads it: the validation NLL at the
    largest ``tokens`` (ties: the largest step); ``None`` without one.
    """
    run = result["run"]
    val = [m for m in result.get("metrics") or () if m["split"] == "val" and m["name"] == "nll"]
    last = max(val, key=lambda m: (m["tokens"], m["step"]), default=None)
    return {
        "status": run["status"],
        "val_nll": None if last is None else last["value"],
        "error": run.get("error"),
    }


def run_end(results_dir: str | os.PathLike, run_id: str) -> dict | None:
    """How run ``run_id`` ended, from its result file: :func:`result_end`, or ``None`` without
    a readable result file of that run."""
    try:
        result = read_result(result_path(results_dir, run_id))
    except (OSError, ValueError):
        return None
    if result["run"].get("run_id") != run_id:
        return None
    return result_end(result)


__all__ = ["RUNS_DIRNAME", "result_path", "write_result", "read_result", "result_end", "run_end"]
