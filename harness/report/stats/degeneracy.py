"""Degenerate controls: a control that cannot differ from the parent is not a control.

DESIGN section 3 ("A control that cannot differ from the parent is not a control") and
section 6 (verdict ``invalid: degenerate``). From the degeneracy records every run writes
(DuckDB tables ``route_pairs`` and ``route_params``, see ``db/schema.sql``) and the
``final``/``runs`` frames, :func:`find_degenerate` names each control that is degenerate
in a cell (size, budget), and why. A control is degenerate when any of these holds:

1. **identical routes**: two of its declared routes stayed identical, i.e. at the last
   evaluation of every one of its runs, their summed pseudo-queries and their offsets are
   within :data:`IDENTICAL_TOL` (max over D) at every layer of their site kind. Such a
   pair computes the parent's single route (the symmetric ``dup_route``: two zero-init
   queries averaged into every role get identical gradients forever);
2. **nothing it adds moved**: it adds at least one trainable parameter beyond the
   parent's (rows of ``route_params`` that the parent's runs in the cell lack) and, in
   every one of its runs, none of them ever moved from its initial value (max |change|
   exactly 0 at every evaluation). One parameter that cannot move alone is no sign (runs
   recorded before layer 0's single-source attention site lost its parameters have such
   rows): any added parameter moving anywhere clears the control. A control that adds no
   trainable parameter (``fixed_v``) is not judged by this rule;
3. **no paired difference**: its paired differences with the parent (same seed and
   ``protocol_hash``, finite NLL) are exactly 0 at every seed.

The A/A checks (:data:`harness.report.stats.pairing.AA_VARIANTS`) are exempt: they must equal the
parent. Two equal queries that form ONE route (``query_reparam``) are never compared:
only pairs of routes are. The mapping goes to :func:`harness.report.stats.analysis.analyze` (``degenerate=``),
which gives those controls the verdict ``invalid: degenerate``, taking precedence over every
other verdict.
"""

from __future__ import annotations

import math

import polars as pl

from harness.report.stats.pairing import AA_VARIANTS, of_grid

IDENTICAL_TOL = 1e-6  # max |difference| of summed queries (and offsets) below which two routes are one

Cell = tuple[str, int, str]  # (size, budget_tokens, variant)


def find_degenerate(
    final: pl.DataFrame,
    runs: pl.DataFrame,
    route_pairs: pl.DataFrame | None,
    route_params: pl.DataFrame | None,
    *,
    grid: str | None = None,
    aa_variants: tuple[str, ...] = AA_VARIANTS,
    tol: float = IDENTICAL_TOL,
) -> dict[Cell, str]:
    """The degenerate controls of one grid, by cell, with the reason (DESIGN section 3).

    Args:
        final: the ``final`` view: run_id, variant, role, seed, size, budget_tokens,
            protocol_hash, val_nll (nats/token) [, grid].
        runs: the ``runs`` table: run_id, variant, role, size, budget_tokens, status [, grid].
        route_pairs: table ``route_pairs`` (run_id, tokens, layer, site, route_a, route_b,
            query_max_abs_diff, offset_max_abs_diff, js), or None when absent.
        route_params: table ``route_params`` (run_id, tokens, layer, site, name,
            max_abs_change, ...), or None when absent.
        grid: keep only rows of this grid (where a frame has a ``grid`` column).
        aa_variants: A/A checks, exempt (they must equal the parent).
        tol: routes whose summed queries and offsets differ by at most this much at every
            layer are identical (default :data:`IDENTICAL_TOL`).

    Returns:
        ``{(size, budget_tokens, variant): reason}`` for every degenerate control (role
        ``control``, not an A/A check); ``reason`` is one line naming each criterion met
        and its numbers, e.g. ``"routes qk and dup stayed identical at every attn site
        (max |summed-query difference| = 0, 3 run(s))"``. Controls without done runs, or
        without records for a criterion, are not judged by that criterion.
    """
    final, runs = of_grid(final, grid), of_grid(runs, grid)
    done = runs.filter(pl.col("status") == "done")
    controls = done.filter((pl.col("role") == "control") & ~pl.col("variant").is_in(list(aa_variants)))
    parents = done.filter(pl.col("role") == "parent")
    out: dict[Cell, str] = {}
    for (size, budget, variant), rows in controls.group_by(["size", "budget_tokens", "variant"]):
        ids = rows["run_id"].to_list()
        parent_ids = parents.filter((pl.col("size") == size) & (pl.col("budget_tokens") == budget))[
            "run_id"
        ].to_list()
        reasons = [
            r
            for r in (
                _identical_routes(route_pairs, ids, tol),
                _nothing_moved(route_params, ids, parent_ids),
                _no_paired_difference(final, variant, size, budget),
            )
            if r
        ]
        if reasons:
            out[(str(size), int(budget), str(variant))] = "; ".join(reasons)
    return out


# --------------------------------------------------------------------------- criteria


def _fmt(x: float) -> str:
    return "0" if x == 0 else f"{x:.3g}"


def _identical_routes(route_pairs: pl.DataFrame | None, run_ids: list[str], tol: float) -> str:
    """Criterion 1: a route pair within ``tol`` at every layer, at the last evaluation of every run."""
    if route_pairs is None or route_pairs.height == 0:
        return ""
    rows = route_pairs.filter(pl.col("run_id").is_in(run_ids))
    if rows.height == 0:
        return ""
    last = rows.group_by("run_id").agg(pl.col("tokens").max().alias("last"))
    rows = rows.join(last, on="run_id").filter(pl.col("tokens") == pl.col("last"))
    n_runs = rows["run_id"].n_unique()
    per_pair = (
        rows.with_columns(
            pl.max_horizontal(
                pl.col("query_max_abs_diff").fill_null(math.inf), pl.col("offset_max_abs_diff").fill_null(0.0)
            ).alias("diff")
        )
        .group_by(["site", "route_a", "route_b"])
        .agg(
            pl.col("diff").max().alias("diff"),
            pl.col("run_id").n_unique().alias("runs"),
            pl.col("query_max_abs_diff").max().alias("query"),
        )
        .filter((pl.col("diff") <= tol) & (pl.col("runs") == n_runs))
        .sort(["site", "route_a", "route_b"])
    )
    return "; ".join(
        f"routes {r['route_a']} and {r['route_b']} stayed identical at every {r['site']} site (max |summed-query "
        f"difference| = {_fmt(r['query'])}, tolerance {tol:g}, {n_runs} run(s)): they compute the parent's single route"
        for r in per_pair.iter_rows(named=True)
    )


def _nothing_moved(route_params: pl.DataFrame | None, run_ids: list[str], parent_ids: list[str]) -> str:
    """Criterion 2: every parameter the control adds stayed at its initial value in every run."""
    if route_params is None or route_params.height == 0:
        return ""
    key = ["layer", "site", "name"]
    mine = route_params.filter(pl.col("run_id").is_in(run_ids))
    if mine.height == 0:
        return ""
    parent = route_params.filter(pl.col("run_id").is_in(parent_ids)).select(key).unique()
    added = mine.join(parent, on=key, how="anti")
    if added.height == 0:
        return ""  # adds no trainable parameter: not judged by this rule (fixed_v)
    moved = added.group_by("run_id").agg(pl.col("max_abs_change").max().alias("moved"))
    if moved.filter((pl.col("moved") != 0) | pl.col("moved").is_null()).height:  # NaN or null: no claim
        return ""
    names = sorted(set(added["name"].to_list()))
    return (
        f"none of the {added.select(key).unique().height} parameter(s) it adds ({', '.join(names)}) ever moved "
        f"from initialisation (max |change| = 0 in {moved.height} run(s))"
    )


def _no_paired_difference(final: pl.DataFrame, variant: str, size: str, budget: int) -> str:
    """Criterion 3: paired differences with the parent exactly 0 at every seed."""
    cell = final.filter(
        (pl.col("size") == size)
        & (pl.col("budget_tokens") == budget)
        & pl.col("val_nll").is_not_null()
        & pl.col("val_nll").is_finite()
    )
    key = ["seed", "protocol_hash"]
    mine = cell.filter(pl.col("variant") == variant).select(*key, pl.col("val_nll").alias("c"))
    parent = cell.filter(pl.col("role") == "parent").select(*key, pl.col("val_nll").alias("p"))
    pairs = mine.join(parent, on=key, how="inner", nulls_equal=True)
    if pairs.height == 0 or (pairs["c"] - pairs["p"]).abs().max() != 0:
        return ""
    return f"its paired differences with the parent are exactly 0 at every seed ({pairs.height} pair(s))"
