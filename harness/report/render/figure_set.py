"""Every figure of the report, in the order the sections show them (:mod:`harness.report.render.figures`,
:mod:`harness.report.render.routing_figures`)."""

from __future__ import annotations

import polars as pl

from harness.report.render.factorial_section import interaction_plot
from harness.report.render.figures import (
    FigureOut,
    gain_fractions,
    gain_vs_budget,
    paired_differences,
    training_curves,
)
from harness.report.render.multiplier_section import parent_curves
from harness.report.render.routing_figures import routing_over_training, routing_variants
from harness.report.stats.results import ReportStats


def all_figures(
    stats: ReportStats, final: pl.DataFrame, metrics: pl.DataFrame | None, routing: pl.DataFrame | None
) -> list[FigureOut]:
    """Every figure of the report, per cell (size, budget), then those spanning cells; absent
    data give no figure."""
    out: list[FigureOut] = []
    for size, budget in stats.cells:
        figs = []
        if metrics is not None and metrics.height:
            figs.append(training_curves(metrics, final, stats, size, budget))
        figs += [paired_differences(stats, size, budget), gain_fractions(stats, size, budget)]
        if routing is not None and routing.height:
            figs += [
                routing_over_training(routing, final, stats, v, size, budget) for v in routing_variants(stats)
            ]
        out += [f for f in figs if f is not None]
        out += [interaction_plot(c) for c in stats.factorial if (c.size, c.budget_tokens) == (size, budget)]
        out += [
            f for f in (parent_curves(stats, size, budget),) if f is not None
        ]  # DESIGN 14, 2+ budgets only
    # Figures spanning the cells of a size (cell = None) follow: gain vs budget (DESIGN 8).
    for size in dict.fromkeys(p.size for p in stats.budget.points):
        out += [f for f in (gain_vs_budget(stats, size),) if f is not None]
    return out


__all__ = ["all_figures"]
