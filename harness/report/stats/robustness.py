"""The tuned robustness row (DESIGN section 9): does the gain survive giving each side its best settings?

A grid's ``[tuned]`` table makes listed variants also run at their own tuned settings
(:mod:`harness.scheduling.grids.grid`; their configs carry ``tuned``, their ids end in
``:tuned``). Those runs stay out of every paired statistic of the frozen protocol
(:func:`split_tuned`); here the treatment's tuned runs are paired with the parent's
tuned runs by size, budget and seed. Their protocols differ by design, but only in the
tuned fields: a pair whose protocols (the ``protocol`` dict each run stores) differ in any
other field is left out, naming it. The row is descriptive (n, mean dNLL with its 95 % t
interval, wins, the one-sided paired t p of H1 mean d < 0 at the plan's alpha); it enters
no family and no verdict, and it prints the tuned fields with each side's values.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import numpy as np
import polars as pl

from harness.common.terms import config_diff
from harness.report.stats import decisions as dec
from harness.report.stats import paired_tests as paired
from harness.report.stats.descriptives import describe
from harness.report.stats.pairing import LeftOut, Pair, RunKey, cell_order, run_key
from harness.report.stats.results import Comparison, Descriptives

KIND = "tuned_treatment_vs_parent"
SUFFIX = " (tuned)"


@dataclass(frozen=True, slots=True)
class TunedRow:
    """The robustness row of one cell.

    Attributes:
        comparison: the descriptives of ``treatment (tuned) - parent (tuned)`` (kind :data:`KIND`).
        pairs: its pairs (NLL nats/token; ``diff`` = treatment - parent).
        p_one_sided: one-sided paired t p of mean d < 0 (exact sign-flip at zero spread);
            NaN below 3 pairs. Descriptive: in no family.
        exact: whether ``p_one_sided`` is the exact sign-flip p.
        fields: the tuned fields, ``"train.lr: 0.0021 (rd_attnres) vs 0.0035 (block_attnres)"``.
        sources: ``(treatment's, parent's)`` tuned sources (``tune:NAME`` or ``explicit``).
        untuned_mean: the frozen protocol's mean treatment - parent difference in the same cell.
    """

    comparison: Comparison
    pairs: tuple[Pair, ...]
    p_one_sided: float
    exact: bool
    fields: tuple[str, ...]
    sources: tuple[str, str]
    untuned_mean: float


def _config(cell) -> dict:
    try:
        cfg = json.loads(cell) if isinstance(cell, str) else cell
    except json.JSONDecodeError:
        return {}
    return cfg if isinstance(cfg, dict) else {}


def split_tuned(
    final: pl.DataFrame, runs: pl.DataFrame
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """``(final, runs)`` of the frozen protocol, then ``(final, runs)`` of the ``[tuned]`` runs.

    A run is tuned when its ``runs.config`` has a ``tuned`` entry.
    """
    if "config" not in runs.columns or runs.height == 0:
        return final, runs, final.head(0), runs.head(0)
    tuned_ids = [rid for rid, cfg in runs.select("run_id", "config").iter_rows() if _config(cfg).get("tuned")]
    is_tuned = pl.col("run_id").is_in(tuned_ids)
    return final.filter(~is_tuned), runs.filter(~is_tuned), final.filter(is_tuned), runs.filter(is_tuned)


def _value(v) -> str:
    return f"{v:.4g}" if isinstance(v, float) else repr(v)


def tuned_rows(
    final: pl.DataFrame,
    runs: pl.DataFrame,
    parent: str,
    treatment: str | None,
    untuned: dict[tuple[str, int], float],
) -> tuple[list[TunedRow], list[LeftOut]]:
    """The robustness rows of the ``[tuned]`` runs (``final``/``runs`` from :func:`split_tuned`).

    Args:
        parent, treatment: the grid's variants (no row without a treatment).
        untuned: ``(size, budget) -> mean treatment - parent d`` of the frozen protocol.

    Returns:
        The rows, one per cell where both the treatment and the parent have tuned runs, and
        the pairs left out (protocols differing outside the tuned fields).
    """
    if treatment is None or final.height == 0:
        return [], []
    cfg = {rid: _config(c) for rid, c in runs.select("run_id", "config").iter_rows()}
    done = final.filter(pl.col("val_nll").is_not_null() & pl.col("val_nll").is_finite())
    by = {run_key(r): r for r in done.iter_rows(named=True)}
    cells = sorted(
        {(k.size, k.budget_tokens) for k in by if k.variant in (parent, treatment)}, key=cell_order
    )
    label = f"{treatment}{SUFFIX} - {parent}{SUFFIX}"
    rows, left = [], []
    for size, budget in cells:
        seeds = sorted({k.seed for k in by if (k.size, k.budget_tokens) == (size, budget)})
        pairs, missing, fields = [], [], {}
        sources = ("", "")
        for seed in seeds:
            a, b = by.get(RunKey(treatment, size, budget, seed)), by.get(RunKey(parent, size, budget, seed))
            if a is None or b is None:
                missing.append(f"seed {seed} ({treatment if a is None else parent}{SUFFIX}: no finished run)")
                continue
            why, tuned_sources = _tuned_fields(a, b, cfg, treatment, parent, fields)
            if why is not None:
                missing.append(f"seed {seed} ({why})")
                left.append(LeftOut.pair(a, b, label, seed, size, budget, why))
                continue
            sources = tuned_sources
            pairs.append(
                Pair(
                    comparison=label,
                    size=size,
                    budget_tokens=budget,
                    seed=seed,
                    run_first=a["run_id"],
                    run_second=b["run_id"],
                    nll_first=a["val_nll"],
                    nll_second=b["val_nll"],
                    diff=a["val_nll"] - b["val_nll"],
                )
            )
        rows.append(
            _tuned_row(
                label,
                treatment,
                parent,
                size,
                budget,
                pairs,
                missing,
                fields,
                sources,
                untuned.get((size, budget), math.nan),
            )
        )
    return rows, left


def _tuned_fields(
    a: dict, b: dict, cfg: dict, treatment: str, parent: str, fields: dict[str, str]
) -> tuple[str | None, tuple[str, str]]:
    """(why the pair is left out, or None; the two tuned sources) for the tuned runs ``a`` (treatment) and
    ``b`` (parent); each tuned field, with both sides' values, is added to ``fields``."""
    ca, cb = cfg.get(a["run_id"], {}), cfg.get(b["run_id"], {})
    ta, tb = ca.get("tuned") or {}, cb.get("tuned") or {}
    tuned_keys = {f"train.{f}" for f in (*ta.get("fields", ()), *tb.get("fields", ()))}
    diff = config_diff(ca.get("protocol"), cb.get("protocol"))
    other = [d for d in diff if d not in tuned_keys]
    if other:
        return f"protocols differ outside the tuned fields: {', '.join(other)}", ("", "")
    for key in sorted(tuned_keys):
        name = key.split(".", 1)[1]
        fields[key] = (
            f"{key}: {_value(ca.get('train', {}).get(name, '(preset)'))} ({treatment}) vs "
            f"{_value(cb.get('train', {}).get(name, '(preset)'))} ({parent})"
        )
    return None, (ta.get("source", ""), tb.get("source", ""))


def _tuned_row(
    label: str,
    treatment: str,
    parent: str,
    size: str,
    budget: int,
    pairs: list[Pair],
    missing: list[str],
    fields: dict[str, str],
    sources: tuple[str, str],
    untuned_mean: float,
) -> TunedRow:
    """One cell's :class:`TunedRow`: descriptives and the one-sided p of its pairs."""
    d = np.array([p.diff for p in pairs])
    stats: Descriptives = describe(d)
    if d.size >= paired.MIN_PAIRS:
        p, exact = dec.headline_p(d)
        p, exact = float(p), bool(exact)
    else:
        p, exact = math.nan, False
    comp = Comparison(
        comparison=label,
        first=f"{treatment}{SUFFIX}",
        second=f"{parent}{SUFFIX}",
        kind=KIND,
        size=size,
        budget_tokens=budget,
        seeds=tuple(q.seed for q in pairs),
        stats=stats,
        missing=tuple(missing),
    )
    return TunedRow(
        comparison=comp,
        pairs=tuple(pairs),
        p_one_sided=p,
        exact=exact,
        fields=tuple(fields.values()),
        sources=sources,
        untuned_mean=untuned_mean,
    )


__all__ = ["KIND", "TunedRow", "split_tuned", "tuned_rows"]
