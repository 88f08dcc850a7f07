"""Report figures as PNG bytes (matplotlib, Agg canvas; DESIGN section 6).

* :func:`training_curves`: training loss and validation NLL vs tokens per variant, mean
  over seeds with a min-max band, and both minus the parent at the same seed;
* :func:`paired_differences`: per comparison, each seed's paired difference and the mean
  with its 95 % t interval (taken from :mod:`harness.report.stats.analysis`, not recomputed);
* :func:`gain_fractions`: per control, the fraction of the gain it reproduces with its
  Fieller interval;
* :func:`harness.report.render.routing_figures.routing_over_training`: depth distributions (layer x
  source) of every attention route at each evaluation, the values written in, QK minus V,
  and the per-layer Jensen-Shannon divergence over training;
* :func:`gain_vs_budget`: per size, each comparison's mean paired difference and 95 % interval
  against log budget (grids with several budgets; DESIGN section 8).

Every figure names its cell (``FigureOut.cell``); a figure spanning the cells of a size
(gain vs budget, DESIGN 8) has ``cell = None`` and gets its own section in the report.

Figures are drawn on :class:`matplotlib.figure.Figure` directly (no pyplot state), so
this module never changes the process-wide backend.
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass

import numpy as np
import PIL.Image
import polars as pl
from matplotlib.figure import Figure

from harness.report.render.fmt import tokens_label as _tokens_label
from harness.report.stats.results import ReportStats

DPI = 110
_ROLE_COLORS = {"parent": "#222222", "treatment": "#d62728", "reference": "#8c8c8c", "aa": "#9a9a9a"}
_CONTROL_COLORS = ("#1f77b4", "#2ca02c", "#ff7f0e", "#9467bd", "#17becf", "#bcbd22", "#e377c2")


@dataclass(frozen=True, slots=True)
class FigureOut:
    """One rendered figure: file stem, title, caption (plain text), PNG bytes, and its cell
    ``(size, budget_tokens)`` (None: it spans cells, e.g. gain vs budget)."""

    name: str
    title: str
    caption: str
    png: bytes
    cell: tuple[str, int] | None = None


def variant_colors(stats: ReportStats) -> dict[str, str]:
    """A fixed colour per variant: parent black, treatment red, reference and A/A grey, controls cycled."""
    colors = {stats.parent: _ROLE_COLORS["parent"]}
    if stats.treatment:
        colors[stats.treatment] = _ROLE_COLORS["treatment"]
    for i, c in enumerate(stats.controls):
        colors[c] = _CONTROL_COLORS[i % len(_CONTROL_COLORS)]
    for r in stats.references:
        colors[r] = _ROLE_COLORS["reference"]
    for a in stats.aa_variants:
        colors[a] = _ROLE_COLORS["aa"]
    return colors


def png_bytes(fig: Figure) -> bytes:
    """The figure as PNG bytes at :data:`DPI`, cropped to its content, as a 256-colour palette
    image: these plots have few colours, and the palette PNG is ~3x smaller than RGBA with no
    visible change (a report embeds every figure)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, bbox_inches="tight")
    buf.seek(0)
    image = (
        PIL.Image.open(buf)
        .convert("RGB")
        .quantize(256, method=PIL.Image.Quantize.FASTOCTREE, dither=PIL.Image.Dither.NONE)
    )
    out = io.BytesIO()
    image.save(out, format="PNG", optimize=True)
    return out.getvalue()


def variant_order(stats: ReportStats) -> list[str]:
    """Parent, treatment, controls, A/A checks, references: the order of every legend."""
    treatment = [stats.treatment] if stats.treatment else []
    return [stats.parent, *treatment, *stats.controls, *stats.aa_variants, *stats.references]


def _band(frame: pl.DataFrame, smooth: int) -> pl.DataFrame:
    """Per tokens: mean, min and max over seeds of ``value`` (after a centred rolling mean over
    ``smooth`` logged points per seed), and the number of seeds."""
    if smooth > 1:
        frame = frame.sort("seed", "tokens").with_columns(
            pl.col("value").rolling_mean(smooth, min_samples=1, center=True).over("seed")
        )
    return (
        frame.group_by("tokens")
        .agg(
            pl.col("value").mean().alias("mean"),
            pl.col("value").min().alias("lo"),
            pl.col("value").max().alias("hi"),
            pl.col("seed").n_unique().alias("n"),
        )
        .sort("tokens")
    )


def _minus_parent(curves: pl.DataFrame, parent: str) -> pl.DataFrame:
    """Each run's curve minus the parent run's at the same seed and token count."""
    p = curves.filter(pl.col("variant") == parent).select(
        "seed", "tokens", pl.col("value").alias("parent_value")
    )
    return curves.join(p, on=["seed", "tokens"]).with_columns(pl.col("value") - pl.col("parent_value"))


def _curve_frames(
    metrics: pl.DataFrame, final: pl.DataFrame, size: str, budget_tokens: int
) -> dict[str, pl.DataFrame]:
    """``{"train": training loss, "val": validation NLL}`` (variant, seed, tokens, value) of the cell's runs
    with a finite final NLL; a kind without a finite value is absent."""
    runs = final.filter(
        (pl.col("size") == size) & (pl.col("budget_tokens") == budget_tokens) & pl.col("val_nll").is_finite()
    ).select("run_id", "variant", "seed")
    m = metrics.join(runs, on="run_id")
    kinds = {
        "train": m.filter((pl.col("split") == "train") & (pl.col("name") == "loss")),
        "val": m.filter((pl.col("split") == "val") & (pl.col("name") == "nll")),
    }
    kinds = {
        k: v.select("variant", "seed", "tokens", "value").filter(pl.col("value").is_finite())
        for k, v in kinds.items()
    }
    return {k: v for k, v in kinds.items() if v.height}


def _draw_variants(
    ax,
    frame: pl.DataFrame,
    stats: ReportStats,
    colors: dict[str, str],
    smooth: int,
    marker: str | None,
    legend: bool,
) -> None:
    """One line (mean over seeds) and band (min-max) per variant of ``frame`` on ``ax``."""
    for variant in variant_order(stats):
        sub = frame.filter(pl.col("variant") == variant)
        if sub.height == 0:
            continue
        agg = _band(sub, smooth)
        x, n = agg["tokens"].to_numpy(), int(agg["n"].max())
        style = "--" if variant in stats.aa_variants else "-"
        ax.plot(
            x,
            agg["mean"].to_numpy(),
            style,
            color=colors.get(variant, "k"),
            lw=1.5,
            marker=marker,
            ms=3,
            label=f"{variant} ({n} seed{'s' if n != 1 else ''})" if legend else None,
        )
        ax.fill_between(
            x, agg["lo"].to_numpy(), agg["hi"].to_numpy(), color=colors.get(variant, "k"), alpha=0.13, lw=0
        )


def training_curves(
    metrics: pl.DataFrame, final: pl.DataFrame, stats: ReportStats, size: str, budget_tokens: int
) -> FigureOut | None:
    """Training loss and validation NLL (nats/token) vs tokens, one line per variant.

    Four panels: training loss and validation NLL (top), each minus the parent run of the
    same seed at the same token count (bottom; same seed = same batches, so the paired
    curve is far less noisy than either). Line = mean over seeds, band = min-max over
    seeds; training loss is smoothed per seed by a centred rolling mean over ~1/20 of its
    logged steps (stated in the caption).

    Args:
        metrics: run_id, tokens, split, name, value (rows split 'train' name 'loss' and
            split 'val' name 'nll' are used).
        final: the finished runs (run_id, variant, seed, size, budget_tokens, val_nll);
            only runs with a finite final NLL are drawn, as in the statistics.

    Returns:
        the figure, or None when there is no curve for this size and budget.
    """
    kinds = _curve_frames(metrics, final, size, budget_tokens)
    if not kinds:
        return None
    steps = kinds["train"].group_by("variant", "seed").len()["len"].max() if "train" in kinds else 0
    smooth = {"train": max(1, int(steps or 0) // 20), "val": 1}
    colors = variant_colors(stats)
    fig = Figure(figsize=(11, 7.6), layout="constrained")
    axes = fig.subplots(2, len(kinds), squeeze=False, sharex=True)
    labels = {"train": "training loss", "val": "validation NLL"}
    for col, (kind, curves) in enumerate(kinds.items()):
        for row, frame in enumerate((curves, _minus_parent(curves, stats.parent))):
            ax = axes[row][col]
            _draw_variants(
                ax,
                frame,
                stats,
                colors,
                smooth[kind],
                marker="o" if kind == "val" else None,
                legend=(row, col) == (0, 0),
            )
            ax.grid(alpha=0.3)
            ax.xaxis.set_major_formatter(_tokens_label)
            if row == 0:
                ax.set_title(
                    f"{labels[kind]} (nats/token)"
                    + (f", rolling mean over {smooth[kind]} steps" if smooth[kind] > 1 else ""),
                    fontsize=10,
                )
                ax.set_ylabel("nats/token")
            else:
                ax.axhline(0, color="k", lw=0.8)
                ax.set_title(f"{labels[kind]} minus {stats.parent}, same seed (< 0: better)", fontsize=10)
                ax.set_ylabel("difference (nats/token)")
                ax.set_xlabel("training tokens")
    fig.legend(loc="outside lower center", ncol=min(4, len(variant_order(stats))), fontsize=8, frameon=False)
    fig.suptitle(
        f"Training and validation curves, size {size}, budget {_tokens_label(budget_tokens)} tokens "
        "(line: mean over seeds; band: min-max over seeds)",
        fontsize=11,
    )
    smoothed = (
        f" Training loss is the per-step loss of each run smoothed by a centred rolling mean over "
        f"{smooth['train']} logged steps, then averaged over seeds."
        if smooth.get("train", 1) > 1
        else ""
    )
    return FigureOut(
        f"curves_{size}_{budget_tokens}",
        f"Training and validation curves ({size}, {_tokens_label(budget_tokens)} tokens)",
        "Training loss and validation NLL vs training tokens per variant; line = mean over seeds, band "
        "= min-max over seeds. Bottom: each run minus the parent run of the same seed at the same token "
        "count (same seed = same batches and initialisation), below 0 = better than the parent." + smoothed,
        png_bytes(fig),
        (size, budget_tokens),
    )


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
            ax.errorbar(
                [st.mean],
                [y],
                xerr=[[st.mean - st.ci_low], [st.ci_high - st.mean]],
                fmt="D",
                color="k",
                ms=5,
                capsize=4,
                lw=1.3,
                zorder=4,
            )
        text = f"{st.wins}/{st.n} wins"
        h = stats.headline(size, budget_tokens) if c.kind == "treatment_vs_parent" else None
        a = stats.assessment(c.first, size, budget_tokens) if c.kind == "control_vs_parent" else None
        if h is not None:
            text += f", {h.verdict}"
        elif a is not None:
            text += f", {a.verdict.split(':')[0]}"
        elif c.kind == "aa_check" and (aa := stats.aa_check(c.first, size, budget_tokens)) is not None:
            text += f", A/A {aa.status}"
        ax.annotate(text, xy=(1.01, y), xycoords=("axes fraction", "data"), va="center", fontsize=8)
    ax.axvline(0, color="k", lw=0.8)
    _label_rows(
        ax,
        [c.comparison for c in reversed(comps)],
        "paired difference in validation NLL (nats/token), first - second; < 0: first is better",
        f"Paired differences per seed, size {size}, budget {_tokens_label(budget_tokens)} tokens "
        "(diamond: mean, bar: 95 % t interval)",
    )
    return FigureOut(
        f"paired_diffs_{size}_{budget_tokens}",
        f"Paired differences ({size}, {_tokens_label(budget_tokens)} tokens)",
        "Each dot is one seed's difference in final validation NLL (first - second); "
        "the diamond is the mean and the bar its 95 % t interval (df = n - 1). "
        "Right: pairs won, and the headline or control verdict.",
        png_bytes(fig),
        (size, budget_tokens),
    )


def gain_fractions(stats: ReportStats, size: str, budget_tokens: int) -> FigureOut | None:
    """Fraction of the gain each control reproduces, f = mean(c - p) / mean(t - p), with its
    95 % Fieller interval (an arrow to the edge where it is unbounded). None without any f."""
    rows = [
        a
        for a in stats.assessments
        if (a.size, a.budget_tokens) == (size, budget_tokens) and math.isfinite(a.fraction)
    ]
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
            ax.errorbar(
                [a.fraction],
                [y],
                xerr=[[a.fraction - a.fraction_low], [a.fraction_high - a.fraction]],
                fmt="o",
                color=color,
                capsize=4,
            )
        else:
            ax.plot([a.fraction], [y], "o", color=color)
            ax.annotate(
                "", xy=(lo, y), xytext=(hi, y), arrowprops=dict(arrowstyle="<->", color=color, lw=0.8)
            )
        ax.annotate(
            a.verdict.split(":")[0], xy=(1.01, y), xycoords=("axes fraction", "data"), va="center", fontsize=8
        )
    for x, style in ((0, "-"), (1, "-"), (rho, "--")):
        ax.axvline(x, color="k", lw=0.8, ls=style)
    ax.set_xlim(lo - 0.05, hi + 0.05)
    _label_rows(
        ax,
        [a.control for a in reversed(rows)],
        f"fraction of the gain reproduced, f (0 = parent, 1 = treatment, dashed: rho = {rho:g})",
        f"Gain fraction per control, size {size}, budget {_tokens_label(budget_tokens)} tokens "
        "(bar: 95 % Fieller interval)",
    )
    return FigureOut(
        f"gain_fraction_{size}_{budget_tokens}",
        f"Gain fractions ({size}, {_tokens_label(budget_tokens)} tokens)",
        "f = mean(control - parent) / mean(treatment - parent) over the seeds where all three ran, "
        "with its 95 % Fieller interval; a double arrow marks an unbounded interval (the gain's own "
        "95 % interval covers 0).",
        png_bytes(fig),
        (size, budget_tokens),
    )


def gain_vs_budget(stats: ReportStats, size: str) -> FigureOut | None:
    """Mean paired difference (nats/token) with its 95 % t interval against the budget (log axis), one
    line per comparison with the parent, at one size (DESIGN section 8); the legend gives the slope
    per doubling from ``d ~ log2(budget) + (1 | seed)`` (:mod:`harness.report.stats.budget`). None with one budget."""
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
        label = comp + (
            f" (slope {s.slope:+.4f} per doubling)" if s is not None and math.isfinite(s.slope) else ""
        )
        ax.errorbar(
            x,
            y,
            yerr=[lo, hi],
            fmt="o-",
            color=colors.get(comp.split(" - ")[0], "k"),
            capsize=3,
            lw=1.2,
            ms=4,
            label=label,
        )
    ax.axhline(0, color="k", lw=0.8)
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(_tokens_label)
    ax.set_xticks(sorted({p.budget_tokens for p in points}))
    ax.set_xlabel("training budget (tokens, log scale)")
    ax.set_ylabel("mean paired difference vs parent (nats/token)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, frameon=False)
    ax.set_title(
        f"Gain vs budget, size {size} (mean with 95 % t interval; < 0: better than the parent)", fontsize=10
    )
    return FigureOut(
        f"gain_vs_budget_{size}",
        f"Gain vs budget ({size})",
        "Mean paired difference with the parent (first - parent, nats/token) and its 95 % t interval "
        "at each budget; points of different comparisons are dodged slightly along the log axis. "
        "Slopes per doubling of the budget from d ~ log2(budget) + (1 | seed), descriptive.",
        png_bytes(fig),
        None,
    )
