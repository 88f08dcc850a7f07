"""How far below the unigram plateau each cell's runs end (issue "A demo past the unigram plateau").

The plateau is ``runs.unigram_nll`` (:mod:`harness.data.unigram`): the validation targets'
cross-entropy under the training split's unigram distribution, nats/token. Runs still near
it have learned token frequencies only; their paired differences are dominated by *when*
each seed leaves the plateau, not by how it routes depth. Descriptive: it enters no verdict.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import polars as pl

from harness.report.stats.pairing import cell_order

#: Plateaus of one cell differing by more than this (nats/token) mean its runs were scored on
#: different corpora, vocabularies or validation sets; the row says so.
SPREAD_TOL = 1e-9


@dataclass(frozen=True, slots=True)
class PlateauRow:
    """One cell's final validation NLL next to its unigram plateau.

    Attributes:
        size, budget_tokens: the cell.
        unigram_nll: the plateau, nats/token (mean over the cell's runs; NaN where no run
            recorded one: runs written before the column existed).
        n_runs: finished runs with a finite final NLL.
        final_min, final_mean, final_max: their final validation NLL, nats/token.
        margin: ``unigram_nll - final_max``: how far below the plateau the *worst* run ended.
        spread: max - min of the recorded plateaus (0 when every run was scored alike).
    """

    size: str
    budget_tokens: int
    unigram_nll: float
    n_runs: int
    final_min: float
    final_mean: float
    final_max: float
    margin: float
    spread: float


def plateau_rows(final: pl.DataFrame, runs: pl.DataFrame) -> tuple[PlateauRow, ...]:
    """Per cell, the plateau and the finite final NLLs of its finished runs.

    Args:
        final: one row per finished run (``run_id, size, budget_tokens, val_nll``).
        runs: ``runs`` rows of the same grid (``run_id`` and, when recorded, ``unigram_nll``).

    Returns:
        One :class:`PlateauRow` per cell with a finite final NLL, in cell order.
    """
    if final.height == 0:
        return ()
    plateau = (
        runs.select("run_id", "unigram_nll")
        if "unigram_nll" in runs.columns
        else runs.select("run_id").with_columns(unigram_nll=pl.lit(None, dtype=pl.Float64))
    )
    df = (
        final.select("run_id", "size", "budget_tokens", "val_nll")
        .filter(pl.col("val_nll").is_not_null() & pl.col("val_nll").is_finite())
        .join(plateau, on="run_id", how="left")
    )
    rows = []
    for (size, budget), g in df.group_by(["size", "budget_tokens"]):
        u = g["unigram_nll"].drop_nulls()
        level = float(u.mean()) if u.len() else math.nan
        nll = g["val_nll"]
        rows.append(
            PlateauRow(
                size=size,
                budget_tokens=int(budget),
                unigram_nll=level,
                n_runs=g.height,
                final_min=float(nll.min()),
                final_mean=float(nll.mean()),
                final_max=float(nll.max()),
                margin=level - float(nll.max()),
                spread=float(u.max() - u.min()) if u.len() else 0.0,
            )
        )
    return tuple(sorted(rows, key=lambda r: cell_order((r.size, r.budget_tokens))))


__all__ = ["PlateauRow", "SPREAD_TOL", "plateau_rows"]
