"""The Python entry point for notebooks: a grid's tables and its report's statistics as polars frames.

``import harness`` exposes :func:`results` and :func:`analyze` (lazily, so the CLI starts without
them; ``harness/__init__.py``)::

    import harness
    tables = harness.results("results", grid="rd_controls_small")   # final, runs, metrics, routing
    a = harness.analyze("results", grid="rd_controls_small")         # what `harness report` computes
    a.headline.to_frame(); a.controls.to_frame(); a.aa.to_frame(); a.to_frame()  # = stats.csv
    a.factorial_frame()                                               # grids with [factorial]
    a.multipliers_frame(); a.multiplier_seeds_frame()                 # grids with 2+ budgets (DESIGN 14)

Both read the results store through :class:`harness.store.store.Store`'s read path (read-only connections;
result files not yet in the database are ingested first, as ``harness report`` and ``harness sql``
do; in a folder this process cannot write nothing is written at all). Nothing else is written.
"""

from __future__ import annotations

import dataclasses
import os
import types
import typing
from pathlib import Path
from typing import Any

import polars as pl

from harness.report.build import compute_stats, load_frames
from harness.report.stats.factorial import FACTORIAL_KINDS
from harness.report.stats.results import AACheck, ControlAssessment, Headline, ReportStats
from harness.store.store import Store

TABLES = ("final", "runs", "metrics", "routing")


def _store(results_dir: str | os.PathLike) -> Store:
    """The store of an existing results folder: a mistyped path must not create one (read-only API).

    Raises:
        FileNotFoundError: ``results_dir`` is not a folder.
    """
    if not Path(results_dir).is_dir():
        raise FileNotFoundError(f"results folder {str(results_dir)!r} does not exist")
    return Store(results_dir)


def results(results_dir: str | os.PathLike, grid: str) -> dict[str, pl.DataFrame]:
    """One grid's rows of the store's tables (DESIGN section 5; columns in ``db/schema.sql``).

    Returns:
        ``{"final": one row per done run (val_nll nats/token, val_bpb, val_ppl), "runs": one row
        per run (status, config JSON, ...), "metrics": every logged metric (run_id, step, tokens,
        split, name, value), "routing": per-evaluation routing diagnostics}``.

    Raises:
        FileNotFoundError: ``results_dir`` does not exist (nothing is created).
        ValueError: the grid has no runs (the message lists the grids there are).
    """
    store = _store(results_dir)
    frames = load_frames(store, grid)  # ingests pending result files once; raises for an unknown grid
    metrics = store.query(
        "SELECT * FROM metrics WHERE run_id IN (SELECT run_id FROM runs WHERE grid = ?) "
        "ORDER BY run_id, split, name, tokens",
        [grid],
        ingest=False,
    )
    return {"final": frames.final, "runs": frames.runs, "metrics": metrics, "routing": frames.routing}


class ResultRows(tuple):
    """A tuple of the report's result objects of one dataclass ``kind`` with :meth:`to_frame`."""

    kind: type

    def __new__(cls, rows, kind: type) -> ResultRows:
        self = super().__new__(cls, rows)
        self.kind = kind
        return self

    def to_frame(self) -> pl.DataFrame:
        """One row per object; nested results (``seeds_needed``, ``look``) become prefixed columns
        (``seeds_needed_n``, ``look_k``; null where the object has none), tuples (``seeds``) space-joined
        text. The columns and their types come from ``kind``, so an empty table (a grid without
        controls, without an A/A check) has them too."""
        return pl.DataFrame([_flat(obj, self.kind) for obj in self], schema=_schema(self.kind), orient="row")


def _nested(hint: Any) -> type | None:
    """The dataclass a field of type ``hint`` holds (``X`` or ``X | None``), else ``None``."""
    args = [a for a in typing.get_args(hint) if a is not type(None)] if typing.get_args(hint) else [hint]
    return args[0] if len(args) == 1 and dataclasses.is_dataclass(args[0]) else None


def _dtype(hint: Any) -> pl.DataType:
    """The column type of a field of type ``hint`` (``X | None`` as ``X``; a tuple is its joined text)."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    base = typing.get_origin(hint) or hint
    if base in (typing.Union, types.UnionType) and len(args) == 1:
        return _dtype(args[0])
    return {bool: pl.Boolean, int: pl.Int64, float: pl.Float64}.get(base, pl.String)


def _schema(kind: type, prefix: str = "") -> dict[str, pl.DataType]:
    hints = typing.get_type_hints(kind)
    schema: dict[str, pl.DataType] = {}
    for f in dataclasses.fields(kind):
        nested = _nested(hints[f.name])
        if nested is not None:
            schema.update(_schema(nested, f"{prefix}{f.name}_"))
        else:
            schema[prefix + f.name] = _dtype(hints[f.name])
    return schema


def _flat(obj: Any, kind: type, prefix: str = "") -> list[Any]:
    """``obj``'s values in :func:`_schema`'s column order (``obj`` None: a nested result not there)."""
    hints = typing.get_type_hints(kind)
    row: list[Any] = []
    for f in dataclasses.fields(kind):
        value = None if obj is None else getattr(obj, f.name)
        nested = _nested(hints[f.name])
        if nested is not None:
            row.extend(_flat(value, nested, f"{prefix}{f.name}_"))
        elif isinstance(value, tuple):
            row.append(" ".join(map(str, value)))
        else:
            row.append(value)
    return row


@dataclasses.dataclass(frozen=True)
class Analysis:
    """The report's statistics of one grid (:class:`harness.report.stats.results.ReportStats` in ``stats``).

    ``headline``: :class:`~harness.report.stats.results.Headline` per size x budget (treatment - parent,
    nats/token); ``controls``: :class:`~harness.report.stats.results.ControlAssessment` per control and
    cell; ``aa``: :class:`~harness.report.stats.results.AACheck` per A/A variant and cell. Each has
    ``.to_frame()``; :meth:`to_frame` is the report's ``stats.csv``, :meth:`pairs_frame` its ``pairs.csv``.
    """

    stats: ReportStats
    headline: ResultRows
    controls: ResultRows
    aa: ResultRows

    def to_frame(self) -> pl.DataFrame:
        """Every comparison, one row each: the columns of ``stats.csv``."""
        return self.stats.to_frame()

    def pairs_frame(self) -> pl.DataFrame:
        """Every matched pair (run ids, NLLs, paired difference): ``pairs.csv``."""
        return self.stats.pairs_frame()

    def factorial_frame(self) -> pl.DataFrame:
        """The factorial contrasts of a grid with ``[factorial]`` (DESIGN 12): their ``stats.csv`` rows, kinds
        ``factorial_simple``, ``factorial_main``, ``factorial_interaction`` (empty frame without a factorial)."""
        return self.stats.to_frame().filter(pl.col("kind").is_in(FACTORIAL_KINDS))

    def multipliers_frame(self) -> pl.DataFrame:
        """The compute and time multipliers per comparison, basis and cell (DESIGN 14): ``multipliers.csv``;
        an empty frame with its columns where each size has one budget (``stats.multipliers.note`` says why)."""
        return self.stats.multipliers.frame()

    def multiplier_seeds_frame(self) -> pl.DataFrame:
        """Each seed's multiplier, censoring flag and reason left out (DESIGN 14): ``multiplier_seeds.csv``."""
        return self.stats.multipliers.seeds_frame()


def analyze(results_dir: str | os.PathLike, grid: str, *, allow_partial: bool = False) -> Analysis:
    """The statistics ``harness report --grid GRID`` shows (DESIGN section 6), without writing files.

    Raises:
        FileNotFoundError: ``results_dir`` does not exist (nothing is created).
        ValueError: unknown grid, or no finished parent run; harness.report.stats.pairing.ProtocolMismatchError:
            paired runs differ in protocol (``allow_partial=True`` leaves those pairs out with a warning).
    """
    stats = compute_stats(load_frames(_store(results_dir), grid), grid=grid, allow_partial=allow_partial)
    return Analysis(
        stats,
        ResultRows(stats.headlines, Headline),
        ResultRows(stats.assessments, ControlAssessment),
        ResultRows(stats.aa_checks, AACheck),
    )


__all__ = [
    "Analysis",
    "ResultRows",
    "TABLES",
    "analyze",
    "results",
]
