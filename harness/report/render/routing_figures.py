"""Routing heatmaps over training (DESIGN section 6 figures: layer x source, QK vs V).

For one variant in one cell: the mean depth distribution of every attention route at
each evaluation (layer x source, mean over the variant's finished seeds, the weight
written in each cell), QK minus V where the variant has a separate V route, and the
per-layer Jensen-Shannon divergence JS(QK, V) over training. Source 0 is the token
embedding; a blank cell is a source not available at that layer.
"""

from __future__ import annotations

import numpy as np
import polars as pl
from matplotlib.figure import Figure

from harness.report.render.figures import FigureOut, png_bytes, variant_order
from harness.report.render.fmt import tokens_label
from harness.report.stats.results import ReportStats

MAX_EVALS = 8  # evaluations drawn per figure (evenly spaced, first and last included)
MAX_PER_ROW = 4  # evaluations per row of panels, fewer where the panels are wide
FIG_WIDTH_IN = 10.5  # about the report's column at 110 dpi: the written values stay legible
_ROUTE_NAMES = {"qk": "QK route (r0)", "v": "V route (r1)", "dup": "second route (r1)"}


def routing_variants(stats: ReportStats) -> list[str]:
    """Variants that may get a routing figure: parent, treatment, controls (not A/A, not references)."""
    return [v for v in variant_order(stats) if v not in stats.aa_variants and v not in stats.references]


def _evals(tokens: list[int]) -> list[int]:
    """At most :data:`MAX_EVALS` token counts, evenly spaced over ``tokens`` (sorted), ends included."""
    if len(tokens) <= MAX_EVALS:
        return tokens
    idx = np.unique(np.round(np.linspace(0, len(tokens) - 1, MAX_EVALS)).astype(int))
    return [tokens[i] for i in idx]


def _matrix(r: pl.DataFrame, route: str, tokens: int, shape: tuple[int, int]) -> np.ndarray:
    m = np.full(shape, np.nan)
    agg = (
        r.filter((pl.col("route") == route) & (pl.col("tokens") == tokens))
        .group_by("layer", "source")
        .agg(pl.col("weight").mean())
    )
    for layer, source, w in agg.iter_rows():
        m[layer, source] = w
    return m


def _heatmap(ax, m: np.ndarray, cmap: str, vmin: float, vmax: float, signed: bool):
    im = ax.imshow(
        np.ma.masked_invalid(m),
        aspect="auto",
        cmap=cmap,
        vmin=vmin,
        vmax=vmax,
        origin="lower",
        interpolation="nearest",
    )
    mid = (vmin + vmax) / 2
    for (layer, src), w in np.ndenumerate(m):
        if np.isfinite(w):
            dark = (abs(w) > 0.55 * vmax) if signed else (w < mid)
            # Signed values drop the leading zero ("+.21") so they fit the same cell width.
            label = ("0" if abs(w) < 0.005 else f"{w:+.2f}".replace("0.", ".", 1)) if signed else f"{w:.2f}"
            ax.text(
                src, layer, label, ha="center", va="center", fontsize=7.5, color="white" if dark else "black"
            )
    ax.set_xticks(range(m.shape[1]))
    ax.set_yticks(range(m.shape[0]))
    ax.tick_params(labelsize=7)
    return im


def _heatmap_row(
    fig, cells: list, kind: str, evals: list[int], panels: dict[int, np.ndarray], vmax: float, last: bool
) -> None:
    """One row of panels: route ``kind`` (or ``"qk - v"``, signed) at each evaluation, one colour bar."""
    row_axes, im = [], None
    for col, t in enumerate(evals):
        ax = fig.add_subplot(cells[col])
        row_axes.append(ax)
        if kind == "qk - v":
            im = _heatmap(ax, panels[t], "RdBu_r", -vmax, vmax, True)
        else:
            im = _heatmap(ax, panels[t], "viridis", 0.0, vmax, False)
        name = "QK minus V" if kind == "qk - v" else _ROUTE_NAMES.get(kind, f"route {kind}")
        ax.set_title(f"{name}, {t:,} tokens", fontsize=8)
        if col == 0:
            ax.set_ylabel("layer", fontsize=8)
        if last:
            ax.set_xlabel("source (0 = embedding)", fontsize=8)
    # One colour bar per row of panels (weights share one scale, QK - V another).
    bar = fig.colorbar(im, ax=row_axes, shrink=0.9, aspect=12, pad=0.01)
    bar.ax.tick_params(labelsize=7)
    bar.set_label("QK - V" if kind == "qk - v" else "weight", fontsize=8)


def _js_panel(ax, r: pl.DataFrame) -> None:
    """JS(QK, V) per layer against training tokens (nats; mean over runs of the per-token ``js_qk_v``)."""
    per = (
        r.filter(pl.col("route") == "v")
        .group_by("tokens", "layer", "run_id")
        .agg(pl.col("js_qk_v").first())
        .group_by("tokens", "layer")
        .agg(pl.col("js_qk_v").mean())
        .sort("layer", "tokens")
    )
    for layer in sorted(per["layer"].unique().to_list()):
        sub = per.filter(pl.col("layer") == layer)
        ax.plot(
            sub["tokens"].to_numpy(), sub["js_qk_v"].to_numpy(), "o-", ms=3, lw=1.2, label=f"layer {layer}"
        )
    ax.set_xlabel("training tokens")
    ax.set_ylabel("JS(QK, V) (nats)")
    ax.xaxis.set_major_formatter(tokens_label)
    ax.set_title(
        "per-token Jensen-Shannon divergence between the QK and V depth distributions, per layer", fontsize=9
    )
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, frameon=False, loc="center left", bbox_to_anchor=(1.0, 0.5))


def routing_over_training(
    routing: pl.DataFrame,
    final: pl.DataFrame,
    stats: ReportStats,
    variant: str,
    size: str,
    budget_tokens: int,
) -> FigureOut | None:
    """Heatmaps of every attention route of ``variant`` at each evaluation, with the values.

    Rows of panels: each route (QK, then V or the second route), then QK minus V where
    there is a V route; columns: evaluations (at most :data:`MAX_EVALS`, :data:`MAX_PER_ROW`
    per row, fewer for wide panels). A last panel plots JS(QK, V) per layer against training tokens (nats; the
    per-token mean ``js_qk_v``). Weights are means over the variant's finished seeds.

    Returns:
        the figure, or None when the variant has no attention routing rows in this cell, or
        it is neither parent nor treatment and has only the QK route (nothing new to show).
    """
    runs = final.filter(
        (pl.col("variant") == variant)
        & (pl.col("size") == size)
        & (pl.col("budget_tokens") == budget_tokens)
        & pl.col("val_nll").is_finite()
    ).select("run_id", "seed")
    r = routing.join(runs, on="run_id").filter(pl.col("site") == "attn")
    routes = sorted(r["route"].unique().to_list(), key=lambda x: (x != "qk", x != "v", x))
    if r.height == 0 or (routes == ["qk"] and variant not in (stats.parent, stats.treatment)):
        return None
    evals = _evals(sorted(r["tokens"].unique().to_list()))
    shape = (int(r["layer"].max()) + 1, int(r["source"].max()) + 1)
    mats = {(route, t): _matrix(r, route, t, shape) for route in routes for t in evals}
    has_v = "qk" in routes and "v" in routes
    diffs = {t: mats[("qk", t)] - mats[("v", t)] for t in evals} if has_v else {}
    kinds = routes + (["qk - v"] if has_v else [])
    pw, ph = max(1.9, 0.3 * shape[1] + 0.5), max(1.5, 0.26 * shape[0] + 0.6)
    per_row = max(2, min(MAX_PER_ROW, int((FIG_WIDTH_IN - 1) // pw)))
    chunks = [evals[i : i + per_row] for i in range(0, len(evals), per_row)]
    ncols = min(per_row, len(evals))
    js = has_v and len(evals) > 1 and "js_qk_v" in r.columns and r["js_qk_v"].drop_nulls().len() > 0
    nrows = len(chunks) * len(kinds) + (1 if js else 0)
    fig = Figure(figsize=(pw * ncols + 1.0, ph * nrows + 0.9), layout="constrained")
    grid = fig.add_gridspec(nrows, ncols)
    _route_panels(fig, grid, chunks, kinds, mats, diffs)
    if js:
        _js_panel(fig.add_subplot(grid[nrows - 1, :]), r)
    n_seeds = r["seed"].n_unique()
    shown = (
        "every evaluation"
        if len(evals) == r["tokens"].n_unique()
        else (f"{len(evals)} of {r['tokens'].n_unique()} evaluations, evenly spaced")
    )
    fig.suptitle(
        f"Depth routing of {variant} at the attention site over training, size {size}, budget "
        f"{tokens_label(budget_tokens)} tokens (mean over {n_seeds} seed(s), {shown})",
        fontsize=10,
    )
    what = ", ".join(_ROUTE_NAMES.get(k, f"route {k}") for k in routes)
    return FigureOut(
        f"routing_{variant}_{size}_{budget_tokens}",
        f"Routing of {variant} over training ({size}, {tokens_label(budget_tokens)} tokens)",
        f"Mean depth distribution over sources per layer ({what}) at {shown}, the weight written in each cell; "
        "blank = source not available at that layer. "
        + (
            "QK minus V: red where the QK route weighs a source more than the V route. Last panel: JS(QK, V) per "
            "layer over training, nats. "
            if has_v
            else ""
        )
        + f"Mean over {n_seeds} finished seed(s).",
        png_bytes(fig),
        (size, budget_tokens),
    )


def _route_panels(
    fig: Figure, grid, chunks: list[list[int]], kinds: list[str], mats: dict, diffs: dict
) -> None:
    """Draw the heatmap rows of :func:`routing_over_training`: for each chunk of evaluations one row per
    route kind (``mats[(route, tokens)]`` [layers, sources]; ``"qk - v"``: ``diffs[tokens]``), the routes
    on one colour scale and QK minus V on a symmetric one."""
    vmax = float(np.nanmax([np.nanmax(m) for m in mats.values()]))
    dmax = max(
        (float(np.nanmax(np.abs(d))) if np.isfinite(d).any() else 0.0 for d in diffs.values()), default=0
    )
    dmax = dmax or 1e-6
    for ci, chunk in enumerate(chunks):
        for ki, kind in enumerate(kinds):
            panels = diffs if kind == "qk - v" else {t: mats[(kind, t)] for t in chunk}
            _heatmap_row(
                fig,
                [grid[ci * len(kinds) + ki, col] for col in range(len(chunk))],
                kind,
                chunk,
                panels,
                dmax if kind == "qk - v" else vmax,
                last=ki == len(kinds) - 1,
            )
