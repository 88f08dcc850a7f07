"""Report figures as PNG bytes (matplotlib, Agg canvas; DESIGN section 6).

* :func:`validation_curves`: validation NLL vs tokens per variant, mean over seeds with
  a min-max band, and the same curves minus the parent at the same seed;
* :func:`paired_differences`: per comparison, each seed's paired difference and the mean
  with its 95 % t interval (taken from :mod:`reports.stats`, not recomputed);
* :func:`gain_fractions`: per control, the fraction of the gain it reproduces with its
  Fieller interval;
* :func:`routing_heatmaps`: depth distributions (layer x source) of the QK and V routes
  at the attention site, and the per-layer Jensen-Shannon divergence between them;
* :func:`gain_vs_budget`: per size, each comparison's mean paired difference and 95 % interval
  against log budget (grids with several budgets; DESIGN section 8).

Figures are drawn on :class:`matplotlib.figure.Figure` directly (no pyplot state), so
this module never changes the process-wide backend.
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass

import numpy as np
import polars as pl
from matplotlib.figure import Figure

from reports.pairing import cell_order
from reports.stats import ReportStats

DPI = 110
_ROLE_COLORS = {"parent": "#222222", "treatment": "#d62728", "reference": "#8c8c8c"}
_CONTROL_COLORS = ("#1f77b4", "#2ca02c", "#ff7f0e", "#9467bd", "#17becf", "#bcbd22", "#e377c2")


@dataclass(frozen=True, slots=True)
class FigureOut:
    """One rendered figure: file stem, title, caption (plain text) and PNG bytes."""

    name: str
    title: str
    caption: str
    png: bytes


def variant_colors(stats: ReportStats) -> dict[str, str]:
    """A fixed colour per variant: parent black, treatment red, reference grey, controls cycled."""
    colors = {stats.parent: _ROLE_COLORS["parent"]}
    if stats.treatment:
        colors[stats.treatment] = _ROLE_COLORS["treatment"]
    for i, c in enumerate(stats.controls):
        colors[c] = _CONTROL_COLORS[i % len(_CONTROL_COLORS)]
    for r in stats.references:
        colors[r] = _ROLE_COLORS["reference"]
    return colors


def _png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, bbox_inches="tight")
    return buf.getvalue()


def _tokens_label(x: float, _pos: object = None) -> str:
    for div, unit in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= div:
            return f"{x / div:g}{unit}"
    return f"{x:g}"


def _variant_order(stats: ReportStats) -> list[str]:
    treatment = [stats.treatment] if stats.treatment else []
    return [stats.parent, *treatment, *stats.controls, *stats.references]


def validation_curves(metrics: pl.DataFrame, final: pl.DataFrame, stats: ReportStats,
                      size: str, budget_tokens: int) -> FigureOut | None:
    """Validation NLL (nats/token) vs tokens, one line per variant, band = min-max over seeds.

    Args:
        metrics: run_id, tokens, split, name, value (rows with split 'val', name 'nll' used).
        final: the finished runs (run_id, variant, seed, size, budget_tokens, val_nll);
            only runs with a finite final NLL are drawn, as in the statistics.

    Returns:
        the figure, or None when there is no validation curve for this size and budget.
    """
    runs = final.filter((pl.col("size") == size) & (pl.col("budget_tokens") == budget_tokens)
                        & pl.col("val_nll").is_finite()).select("run_id", "variant", "seed")
    curves = (metrics.filter((pl.col("split") == "val") & (pl.col("name") == "nll"))
              .join(runs, on="run_id").select("variant", "seed", "tokens", "value"))
    if curves.height == 0:
        return None
    parent_curve = curves.filter(pl.col("variant") == stats.parent).select(
        "seed", "tokens", pl.col("value").alias("parent_value"))
    rel = curves.join(parent_curve, on=["seed", "tokens"]).with_columns(
        (pl.col("value") - pl.col("parent_value")).alias("value"))
    colors = variant_colors(stats)
    fig = Figure(figsize=(11, 4.2))
    axes = fig.subplots(1, 2)
    for ax, frame, ylabel in ((axes[0], curves, "validation NLL (nats/token)"),
                              (axes[1], rel, "NLL minus parent, same seed (nats/token)")):
        for variant in _variant_order(stats):
            sub = frame.filter(pl.col("variant") == variant)
            if sub.height == 0:
                continue
            agg = (sub.group_by("tokens").agg(pl.col("value").mean().alias("mean"),
                                               pl.col("value").min().alias("lo"),
                                               pl.col("value").max().alias("hi"),
                                               pl.col("seed").n_unique().alias("n"))
                   .sort("tokens"))
            x = agg["tokens"].to_numpy()
            n = int(agg["n"].max())
            ax.plot(x, agg["mean"].to_numpy(), color=colors.get(variant, "k"), lw=1.6,
                    label=f"{variant} ({n} seed{'s' if n != 1 else ''})")
            ax.fill_between(x, agg["lo"].to_numpy(), agg["hi"].to_numpy(),
                            color=colors.get(variant, "k"), alpha=0.15, lw=0)
        ax.set_xlabel("training tokens")
        ax.set_ylabel(ylabel)
        ax.xaxis.set_major_formatter(_tokens_label)
        ax.grid(alpha=0.3)
    axes[1].axhline(0, color="k", lw=0.8)
    axes[0].legend(fontsize=8, frameon=False)
    fig.suptitle(f"Validation NLL, size {size}, budget {_tokens_label(budget_tokens)} tokens "
                 "(line: mean over seeds; band: min-max)", fontsize=11)
    return FigureOut(f"val_curves_{size}_{budget_tokens}",
                     f"Validation curves ({size}, {_tokens_label(budget_tokens)} tokens)",
                     "Validation NLL vs training tokens for each variant; line = mean over seeds, "
                     "band = min-max over seeds. Right: each run minus the parent run of the same "
                     "seed at the same token count (below 0 = better than the parent).", _png(fig))


def _label_rows(ax, labels: list[str], xlabel: str, title: str) -> None:
    """One labelled row per item (bottom to top), an x label, a vertical grid and a title."""
    ax.set_yticks(range(len(labels)))
    ax.set_yticklabels(labels, fontsize=9)
    ax.set_ylim(-0.6, len(labels) - 0.4)
    ax.set_xlabel(xlabel)
    ax.grid(axis="x", alpha=0.3)
    ax.set_title(title, fontsize=10)


def paired_differences(stats: ReportStats, size: str, budget_tokens: int) -> FigureOut | None:
    """Dot plot: per comparison, the paired differences (nats/token) and mean with 95 % t CI.

    Mean and interval come from the comparison's descriptives; fewer than 3 pairs draw dots only.
    Returns None when the size and budget have no pair at all.
    """
    comps = [c for c in stats.comparisons if (c.size, c.budget_tokens) == (size, budget_tokens)]
    pairs = [p for p in stats.pairs if (p.size, p.budget_tokens) == (size, budget_tokens)]
    if not comps or not pairs:
        return None
    colors = variant_colors(stats)
    fig = Figure(figsize=(10, 0.55 * len(comps) + 1.4))
    ax = fig.subplots()
    for row, c in enumerate(comps):
        y = len(comps) - 1 - row
        diffs = np.array([p.diff for p in pairs if p.comparison == c.comparison])
        color = colors.get(c.first, "k")
        if diffs.size:
            jitter = np.linspace(-0.18, 0.18, diffs.size) if diffs.size > 1 else np.zeros(1)
            ax.scatter(diffs, y + jitter, s=18, color=color, alpha=0.7, zorder=3)
        st = c.stats
        if math.isfinite(st.ci_low):
            ax.errorbar([st.mean], [y], xerr=[[st.mean - st.ci_low], [st.ci_high - st.mean]],
                        fmt="D", color="k", ms=5, capsize=4, lw=1.3, zorder=4)
        text = f"{st.wins}/{st.n} wins"
        h = stats.headline(size, budget_tokens) if c.kind == "treatment_vs_parent" else None
        a = stats.assessment(c.first, size, budget_tokens) if c.kind == "control_vs_parent" else None
        if h is not None:
            text += f", {h.verdict}"
        elif a is not None:
            text += f", {a.verdict.split(':')[0]}"
        ax.annotate(text, xy=(1.01, y), xycoords=("axes fraction", "data"), va="center", fontsize=8)
    ax.axvline(0, color="k", lw=0.8)
    _label_rows(ax, [c.comparison for c in reversed(comps)],
                "paired difference in validation NLL (nats/token), first - second; < 0: first is better",
                f"Paired differences per seed, size {size}, budget {_tokens_label(budget_tokens)} tokens "
                "(diamond: mean, bar: 95 % t interval)")
    return FigureOut(f"paired_diffs_{size}_{budget_tokens}",
                     f"Paired differences ({size}, {_tokens_label(budget_tokens)} tokens)",
                     "Each dot is one seed's difference in final validation NLL (first - second); "
                     "the diamond is the mean and the bar its 95 % t interval (df = n - 1). "
                     "Right: pairs won, and the headline or control verdict.", _png(fig))


def gain_fractions(stats: ReportStats, size: str, budget_tokens: int) -> FigureOut | None:
    """Fraction of the gain each control reproduces, f = mean(c - p) / mean(t - p), with its
    95 % Fieller interval (an arrow to the edge where it is unbounded). None without any f."""
    rows = [a for a in stats.assessments if (a.size, a.budget_tokens) == (size, budget_tokens)
            and math.isfinite(a.fraction)]
    if not rows:
        return None
    colors = variant_colors(stats)
    fig = Figure(figsize=(8, 0.5 * len(rows) + 1.4))
    ax = fig.subplots()
    rho = stats.plan.reproduce_fraction
    finite = [v for a in rows for v in (a.fraction, a.fraction_low, a.fraction_high) if math.isfinite(v)]
    lo, hi = min(finite + [-0.25]), max(finite + [1.25])
    for y, a in enumerate(reversed(rows)):
        color = colors.get(a.control, "k")
        if a.bounded:
            ax.errorbar([a.fraction], [y], xerr=[[a.fraction - a.fraction_low], [a.fraction_high - a.fraction]],
                        fmt="o", color=color, capsize=4)
        else:
            ax.plot([a.fraction], [y], "o", color=color)
            ax.annotate("", xy=(lo, y), xytext=(hi, y), arrowprops=dict(arrowstyle="<->", color=color, lw=0.8))
        ax.annotate(a.verdict.split(":")[0], xy=(1.01, y), xycoords=("axes fraction", "data"), va="center",
                    fontsize=8)
    for x, style in ((0, "-"), (1, "-"), (rho, "--")):
        ax.axvline(x, color="k", lw=0.8, ls=style)
    ax.set_xlim(lo - 0.05, hi + 0.05)
    _label_rows(ax, [a.control for a in reversed(rows)],
                f"fraction of the gain reproduced, f (0 = parent, 1 = treatment, dashed: rho = {rho:g})",
                f"Gain fraction per control, size {size}, budget {_tokens_label(budget_tokens)} tokens "
                "(bar: 95 % Fieller interval)")
    return FigureOut(f"gain_fraction_{size}_{budget_tokens}",
                     f"Gain fractions ({size}, {_tokens_label(budget_tokens)} tokens)",
                     "f = mean(control - parent) / mean(treatment - parent) over the seeds where all three ran, "
                     "with its 95 % Fieller interval; a double arrow marks an unbounded interval (the gain's own "
                     "95 % interval covers 0).", _png(fig))


def _route_matrix(r: pl.DataFrame, route: str, n_layers: int, n_src: int) -> np.ndarray:
    m = np.full((n_layers, n_src), np.nan)
    agg = r.filter(pl.col("route") == route).group_by("layer", "source").agg(pl.col("weight").mean())
    for layer, source, w in agg.iter_rows():
        m[layer, source] = w
    return m


def routing_heatmaps(routing: pl.DataFrame, final: pl.DataFrame, variant: str, size: str,
                     budget_tokens: int) -> FigureOut | None:
    """QK and V route depth distributions (layer x source) and per-layer JS divergence.

    Uses the attention site's rows at each run's last logged token count, averaged over
    the variant's finished seeds. JS is in nats (base e): per-token average (``js_qk_v``)
    and between the averaged distributions (``js_qk_v_of_means``) where stored.

    Returns:
        the figure, or None when the variant has no separate V route at this size/budget.
    """
    runs = final.filter((pl.col("variant") == variant) & (pl.col("size") == size)
                        & (pl.col("budget_tokens") == budget_tokens) & pl.col("val_nll").is_finite()
                        ).select("run_id", "seed")
    r = routing.join(runs, on="run_id").filter(pl.col("site") == "attn")
    if r.height == 0 or r.filter(pl.col("route") == "v").height == 0:
        return None
    last = r.group_by("run_id").agg(pl.col("tokens").max().alias("last"))
    r = r.join(last, on="run_id").filter(pl.col("tokens") == pl.col("last"))
    n_layers = int(r["layer"].max()) + 1
    n_src = int(r["source"].max()) + 1
    qk, v = _route_matrix(r, "qk", n_layers, n_src), _route_matrix(r, "v", n_layers, n_src)
    vmax = float(np.nanmax([np.nanmax(qk), np.nanmax(v)]))
    n_seeds = r["seed"].n_unique()
    fig = Figure(figsize=(13, 0.35 * n_layers + 2.8), layout="constrained")
    axes = fig.subplots(1, 3, gridspec_kw={"width_ratios": [1, 1.2, 0.8]})
    for ax, m, name in ((axes[0], qk, "QK route"), (axes[1], v, "V route")):
        im = ax.imshow(np.ma.masked_invalid(m), aspect="auto", cmap="viridis", vmin=0, vmax=vmax,
                       origin="lower", interpolation="nearest")
        ax.set_title(f"{name}: mean weight a_i", fontsize=10)
        ax.set_xlabel("source (0 = token embedding)")
        ax.set_ylabel("layer")
        ax.set_xticks(range(n_src))
        ax.set_yticks(range(n_layers))
    fig.colorbar(im, ax=axes[1], label="routing weight (shared scale)")
    ax = axes[2]
    js_cols = [c for c in ("js_qk_v", "js_qk_v_of_means") if c in r.columns]
    per = (r.filter(pl.col("route") == "v").group_by("run_id", "layer")
           .agg([pl.col(c).first() for c in js_cols]))
    layers = np.arange(n_layers)
    styles = {"js_qk_v": ("per-token mean", "o-"), "js_qk_v_of_means": ("of mean distributions", "s--")}
    for c in js_cols:
        by_layer = per.group_by("layer").agg(pl.col(c).mean()).sort("layer")
        if by_layer[c].null_count() == by_layer.height:
            continue
        vals = np.full(n_layers, np.nan)
        for layer, val in by_layer.iter_rows():
            vals[layer] = np.nan if val is None else val
        label, style = styles[c]
        ax.plot(vals, layers, style, label=label, ms=4)
    ax.set_yticks(range(n_layers))
    ax.set_ylim(-0.5, n_layers - 0.5)
    ax.set_xlabel("JS divergence QK vs V (nats)")
    ax.set_ylabel("layer")
    ax.set_title("per-layer JS(QK, V)", fontsize=10)
    ax.set_xlim(left=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, frameon=False)
    fig.suptitle(f"Depth routing of {variant} at the attention site, size {size}, budget "
                 f"{_tokens_label(budget_tokens)} tokens (mean over {n_seeds} seed(s), last evaluation)",
                 fontsize=11)
    return FigureOut(f"routing_{variant}_{size}_{budget_tokens}",
                     f"Routing of {variant} ({size}, {_tokens_label(budget_tokens)} tokens)",
                     "Mean depth distribution over sources per layer for the route feeding Q/K and "
                     "the route feeding V (blank = source not available at that layer), and their "
                     "Jensen-Shannon divergence per layer (nats).", _png(fig))


def gain_vs_budget(stats: ReportStats, size: str) -> FigureOut | None:
    """Mean paired difference (nats/token) with its 95 % t interval against the budget (log axis), one
    line per comparison with the parent, at one size (DESIGN section 8); the legend gives the slope
    per doubling from ``d ~ log2(budget) + (1 | seed)`` (:mod:`reports.budget`). None with one budget."""
    points = [p for p in stats.budget.points if p.size == size]
    if not points:
        return None
    slopes = {s.comparison: s for s in stats.budget.slopes if s.size == size}
    colors = variant_colors(stats)
    fig = Figure(figsize=(8.5, 4.5))
    ax = fig.subplots()
    comparisons = list(dict.fromkeys(p.comparison for p in points))
    for i, comp in enumerate(comparisons):
        rows = [p for p in points if p.comparison == comp]
        x = np.array([p.budget_tokens for p in rows], dtype=float)
        x = x * 2 ** ((i - (len(comparisons) - 1) / 2) * 0.04)  # dodge the comparisons on the log axis
        y = np.array([p.mean for p in rows])
        lo = np.array([p.mean - p.ci_low if math.isfinite(p.ci_low) else 0.0 for p in rows])
        hi = np.array([p.ci_high - p.mean if math.isfinite(p.ci_high) else 0.0 for p in rows])
        s = slopes.get(comp)
        label = comp + (f" (slope {s.slope:+.4f} per doubling)" if s is not None and math.isfinite(s.slope) else "")
        ax.errorbar(x, y, yerr=[lo, hi], fmt="o-", color=colors.get(comp.split(" - ")[0], "k"), capsize=3, lw=1.2,
                    ms=4, label=label)
    ax.axhline(0, color="k", lw=0.8)
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(_tokens_label)
    ax.set_xticks(sorted({p.budget_tokens for p in points}))
    ax.set_xlabel("training budget (tokens, log scale)")
    ax.set_ylabel("mean paired difference vs parent (nats/token)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, frameon=False)
    ax.set_title(f"Gain vs budget, size {size} (mean with 95 % t interval; < 0: better than the parent)",
                 fontsize=10)
    return FigureOut(f"gain_vs_budget_{size}", f"Gain vs budget ({size})",
                     "Mean paired difference with the parent (first - parent, nats/token) and its 95 % t interval "
                     "at each budget; points of different comparisons are dodged slightly along the log axis. "
                     "Slopes per doubling of the budget from d ~ log2(budget) + (1 | seed), descriptive.", _png(fig))


def all_figures(stats: ReportStats, final: pl.DataFrame, metrics: pl.DataFrame | None,
                routing: pl.DataFrame | None) -> list[FigureOut]:
    """Every figure of the report, per size and budget; absent data give no figure."""
    out: list[FigureOut] = []
    cells = sorted({(c.size, c.budget_tokens) for c in stats.comparisons}, key=cell_order)
    variants = _variant_order(stats)
    for size, budget in cells:
        figs = [paired_differences(stats, size, budget), gain_fractions(stats, size, budget)]
        if metrics is not None and metrics.height:
            figs.append(validation_curves(metrics, final, stats, size, budget))
        if routing is not None and routing.height:
            figs += [routing_heatmaps(routing, final, v, size, budget) for v in variants]
        out += [f for f in figs if f is not None]
    for size in dict.fromkeys(p.size for p in stats.budget.points):
        out += [f for f in (gain_vs_budget(stats, size),) if f is not None]
    return out
