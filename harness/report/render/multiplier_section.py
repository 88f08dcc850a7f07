"""The report section "Does the gain pay for its cost?" (:mod:`harness.report.stats.multiplier`, DESIGN section 14):
per cell, each comparison's compute multiplier and its time multiplier per hardware class, with the verdict
words. Only a grid with two or more budgets at a size has the section; a single-budget grid gets one
terminal line instead (:func:`summary_lines`), so reports of single-budget grids do not change."""

from __future__ import annotations

import math

from matplotlib.figure import Figure

from harness.report.render.blocks import Block, Heading, Image, Para, Table
from harness.report.render.figures import FigureOut, png_bytes
from harness.report.render.sentences import cell_label
from harness.report.stats.multiplier import COMPUTE, MultiplierRow, MultiplierStats
from harness.report.stats.results import ReportStats

#: The file stem of the per-cell figure (:func:`parent_curves`).
FIGURE_PREFIX = "multiplier_"
_MARKERS = "osD^v<>p*hX"


def _x(v: float) -> str:
    return "-" if not math.isfinite(v) else f"{v:.3g}x"


def _p(v: float) -> str:
    return "-" if not math.isfinite(v) else f"{v:.3g}"


def where(row: MultiplierRow) -> str:
    """'at equal compute' or 'at equal time on CLASS'."""
    return "at equal compute" if row.basis == COMPUTE else f"at equal time {row.basis.removeprefix('time ')}"


def verdict_sentence(row: MultiplierRow, m: MultiplierStats, alpha: float) -> str:
    """'rd_attnres pays for its cost at equal compute: yes (1.31x [1.12x, 1.53x], Holm p 0.004, 5 seeds)'."""
    words = f"{row.variant} pays for its cost {where(row)}: {row.verdict}"
    detail = f"{_x(row.estimate)} [{_x(row.ci_low)}, {_x(row.ci_high)}], n = {row.n}"
    if row.verdict == "yes":
        detail += f", one-sided p {_p(row.p_one_sided)}, Holm p {_p(row.holm_p)} < {alpha:g}"
    elif row.verdict == "no":
        detail += f", below {m.min_multiplier:g}x: Holm p {_p(row.holm_p_below)} < {alpha:g}"
    else:
        detail += (
            f", Holm p {_p(row.holm_p)} (exceeds 1), {_p(row.holm_p_below)} (below {m.min_multiplier:g}x)"
        )
        if row.censored_below and math.isfinite(row.holm_p) and row.holm_p < alpha:
            detail += "; not yes: a seed is censored below (it enters at an upper bound)"
        detail += "; " + (
            f"seeds to detect {m.min_multiplier:g}x: {row.seeds_needed}"
            if row.seeds_needed
            else f"seeds to detect {m.min_multiplier:g}x: not reachable within max_seeds or no spread yet"
        )
    if row.censored_above or row.censored_below:
        detail += (
            f"; censored: {row.censored_above} seed(s) beat the parent's largest budget (entered at the bound, a "
            f"lower bound), {row.censored_below} fall short of its smallest (an upper bound); extrapolated "
            f"{_x(row.extrapolated)} ({m.extrapolation_model}), in no test"
        )
    return f"{words} ({detail})"


def blocks(stats: ReportStats, figures: list[FigureOut] = ()) -> list[Block]:
    """The section; none where the grid has no multiplier row."""
    m: MultiplierStats | None = stats.multipliers
    if m is None or not m.rows:
        return []
    out: list[Block] = [
        Heading(2, "Does the gain pay for its cost?"),
        Para(
            "Compute multiplier: the training FLOPs the parent needs to reach the variant's final validation NLL "
            "(its complete runs at the grid's budgets, per seed, a monotone PCHIP interpolant in log-tokens) "
            "over the FLOPs the variant spent (6 N + 12 L D T + routing, per token). Time multiplier per hardware class: the same "
            "in seconds, from `harness bench`'s step-time ratio of that class and size where the store has one, "
            "else from the runs' own clocks (the machines' load was not controlled); each row names its source. "
            "Geometric mean over seeds with its "
            f"{100 * (1 - stats.plan.alpha):g} % interval; 'yes' where the one-sided test that it exceeds 1 clears "
            f"Holm over the cell's multiplier tests, 'no' where a one-sided test puts it below min_multiplier "
            f"{m.min_multiplier:g}x (DESIGN section 14).",
            "note",
        ),
    ]
    cells = sorted({(r.size, r.budget_tokens) for r in m.rows}, key=lambda c: (c[0], c[1]))
    for size, budget in cells:
        rows = [r for r in m.rows if (r.size, r.budget_tokens) == (size, budget)]
        out.append(Heading(3, f"Size {size}, budget {budget:_} tokens"))
        out.append(
            Table(
                (
                    "comparison",
                    "basis",
                    "n",
                    "multiplier",
                    "interval",
                    "p (> 1)",
                    "Holm p",
                    "censored",
                    "verdict",
                ),
                tuple(
                    (
                        r.comparison,
                        r.basis,
                        str(r.n),
                        _x(r.estimate),
                        f"[{_x(r.ci_low)}, {_x(r.ci_high)}]",
                        _p(r.p_one_sided),
                        _p(r.holm_p),
                        f"{r.censored_above} above, {r.censored_below} below",
                        r.verdict,
                    )
                    for r in rows
                ),
                tuple(verdict_sentence(r, m, stats.plan.alpha) for r in rows),
                "verdict",
            )
        )
        sources = [f"{r.comparison} ({r.basis}): {r.time_source}" for r in rows if r.time_source]
        if sources:
            out.append(Para("Step-time ratios: " + " | ".join(sources), "note"))
        left = [f"{r.comparison} ({r.basis}): {r.left_out}" for r in rows if r.left_out]
        if left:
            out.append(Para("Seeds left out: " + " | ".join(left), "note"))
        for f in figures:
            if f.cell == (size, budget) and f.name.startswith(FIGURE_PREFIX):
                out += [Image(f), Para(f.caption, "note")]
    return out


def parent_curves(stats: ReportStats, size: str, budget: int) -> FigureOut | None:
    """One cell's figure: each seed's parent final NLL against its training FLOPs (log axis), one line per seed,
    with each compared variant's point at that seed (its FLOPs spent, its final NLL); None without rows."""
    m: MultiplierStats | None = stats.multipliers
    seeds = [
        s for s in (m.seeds if m else ()) if (s.size, s.budget_tokens, s.basis) == (size, budget, COMPUTE)
    ]
    if not seeds:
        return None
    fig = Figure(figsize=(6.0, 4.0))
    ax = fig.add_subplot(1, 1, 1)
    order = sorted({s.seed for s in seeds})
    for i, seed in enumerate(order):
        pts = m.curves.get((size, seed), ())
        color = f"C{i % 10}"
        if pts:
            ax.plot([t * f for t, _, f in pts], [y for _, y, _ in pts], "-", color=color, alpha=0.6, lw=1)
        for k, comparison in enumerate(sorted({s.comparison for s in seeds})):
            for s in seeds:
                if (s.seed, s.comparison) == (seed, comparison) and math.isfinite(s.nll_variant):
                    face = "none" if s.reason or s.censored else color
                    ax.plot(
                        [s.flops_variant * s.tokens_variant],
                        [s.nll_variant],
                        _MARKERS[k % len(_MARKERS)],
                        color=color,
                        mfc=face,
                        ms=6,
                    )
    ax.set_xscale("log")
    ax.set_xlabel("training FLOPs")
    ax.set_ylabel("final validation NLL (nats/token)")
    ax.set_title(f"Parent curves and variants: {cell_label(size, budget)}", fontsize=10)
    ax.grid(alpha=0.3)
    names = ", ".join(
        f"{_MARKERS[k % len(_MARKERS)]} {c.split(' - ')[0]}"
        for k, c in enumerate(sorted({s.comparison for s in seeds}))
    )
    caption = (
        f"One line per seed: the parent's final NLL at each budget against its training FLOPs; markers ({names}): "
        "each variant's final NLL at this budget and the FLOPs it spent, in its seed's colour (hollow: censored or "
        "left out). A marker left of and below its seed's line: the variant reached that NLL with less compute."
    )
    return FigureOut(
        f"{FIGURE_PREFIX}{size}_{budget}",
        "Parent curves and variants",
        caption,
        png_bytes(fig),
        (size, budget),
    )


def summary_lines(stats: ReportStats) -> list[str]:
    """The terminal's lines: each row's verdict sentence, or the single-budget note."""
    m: MultiplierStats | None = stats.multipliers
    if m is None:
        return []
    if m.note:
        return [m.note]
    return [
        f"  {cell_label(r.size, r.budget_tokens)}: {verdict_sentence(r, m, stats.plan.alpha)}" for r in m.rows
    ]


__all__ = ["FIGURE_PREFIX", "blocks", "parent_curves", "summary_lines", "verdict_sentence", "where"]
