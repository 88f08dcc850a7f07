"""The report's "Gain across the axes" section (a grid with ``[axes]``, DESIGN section 1.2): how many cells share the
Holm family, then per axis the gain at every value with its interval, the descriptive trend and one line: does the
verdict hold at every value, at some, or at none (:mod:`harness.report.stats.axes`)."""

from __future__ import annotations

import math

from harness.common.terms import axes_label
from harness.report.render.blocks import Block, Heading, Para, Table
from harness.report.render.fmt import fmt_ci, fmt_nats, fmt_tokens
from harness.report.stats.axes import EVERY, NONE, AxisLine, across_axes
from harness.report.stats.pairing import AXIS_SEP
from harness.report.stats.results import ReportStats


def family_line(stats: ReportStats) -> str:
    """``"Holm runs over the 2 cells with a p (one family): ..."``: how many cells share the verdicts' family."""
    n = max((h.n_cells for h in stats.headlines), default=0)
    return (
        f"Holm runs over the {n} cell(s) with a p of this grid, every axis value its own cell: one family, so "
        "each verdict is adjusted for all of them (DESIGN section 6)."
    )


def verdict_line(line: AxisLine) -> str:
    """One line: does 'gain established' hold at every value of the axis, at some (naming them), or at none."""
    values = ", ".join(p.value for p in line.points)
    if line.holds == EVERY:
        return f"The gain is established at every value of {line.axis} ({values})."
    if line.holds == NONE:
        return f"The gain is established at none of the values of {line.axis} ({values})."
    others = ", ".join(p.value for p in line.points if not p.established)
    return (
        f"The gain is established at some values of {line.axis}: {', '.join(line.held_at)}; not at {others}."
    )


def trend_line(line: AxisLine) -> str:
    """The descriptive trend of d across the axis (no test)."""
    if math.isnan(line.slope):
        first, last = line.points[0], line.points[-1]
        return (
            f"Trend (descriptive): d is {fmt_nats(first.mean)} at {line.axis} {first.value} and "
            f"{fmt_nats(last.mean)} at {last.value}."
        )
    return (
        f"Trend (descriptive, no test): d changes by {fmt_nats(line.slope)} nats/token per doubling of "
        f"{line.axis} (least squares of the per-value means on log2({line.axis}))."
    )


def blocks(stats: ReportStats) -> list[Block]:
    """The section; nothing for a grid without ``[axes]``."""
    if not any(AXIS_SEP in size for size, _ in stats.cells):
        return []
    out: list[Block] = [Heading(2, "Gain across the axes"), Para(family_line(stats), "note")]
    for line in across_axes(stats.headlines, stats.comparisons):
        where = f"size {line.preset}, budget {fmt_tokens(line.budget_tokens)} tokens" + (
            f", {axes_label(line.fixed)}" if line.fixed else ""
        )
        out.append(Heading(3, f"{line.comparison} across {line.axis} ({where})"))
        out.append(
            Table(
                (line.axis, "n", "mean d (nats/token)", "95 % CI", "verdict"),
                tuple(
                    (p.value, str(p.n), fmt_nats(p.mean), fmt_ci(p.ci_low, p.ci_high), p.verdict)
                    for p in line.points
                ),
            )
        )
        out += [Para(trend_line(line), "note"), Para(verdict_line(line))]
    return out


def summary_lines(stats: ReportStats) -> list[str]:
    """The terminal's lines: the family, then per axis the line across it."""
    lines = [line for line in across_axes(stats.headlines, stats.comparisons)]
    if not lines:
        return []
    return [family_line(stats)] + [
        f"across {x.axis} ({x.preset}, {x.budget_tokens:_}): {verdict_line(x)}" for x in lines
    ]


__all__ = ["blocks", "family_line", "summary_lines", "trend_line", "verdict_line"]
