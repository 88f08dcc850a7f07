"""Gain across an axis (DESIGN section 1.2, ``[axes]``): the headline gain at every value of a swept setting.

A grid with ``[axes]`` has one cell per (size, budget, axis values), each with its own verdict, all cells in
one Holm family (:mod:`harness.report.stats.headline_tests`). Across one axis (the other axes, the size and the
budget held), this module gathers each value's mean paired difference d = treatment - parent (nats/token,
95 % t interval, from the report's descriptives, not recomputed) and verdict, and says, descriptively:

* the trend: the least-squares slope of the per-value mean d on log2(value) (nats/token per doubling of the
  setting) where every value is a positive number, else none; a line through few points, no test;
* whether the verdict ``gain established`` holds at every value, at some (naming them), or at none.

No verdict rests on either: a pre-declared contrast across the axis would be its own test.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from harness.report.stats.pairing import AXIS_SEP, cell_order, split_cell_size

#: :attr:`AxisLine.holds` values.
EVERY, SOME, NONE = "every", "some", "none"


@dataclass(frozen=True, slots=True)
class AxisPoint:
    """The headline at one value of an axis: its cell (``size`` label, budget), d's mean and 95 % interval
    (nats/token, ``n`` tested differences) and the verdict."""

    value: str
    size: str
    budget_tokens: int
    n: int
    mean: float
    ci_low: float
    ci_high: float
    verdict: str
    established: bool


@dataclass(frozen=True, slots=True)
class AxisLine:
    """The treatment's gain across one axis at one size, budget and value of every other axis.

    ``slope``: nats/token per doubling of the setting (least squares on the per-value means; NaN when a value
    is not a positive number or fewer than two values have a mean). ``holds``: :data:`EVERY`, :data:`SOME` or
    :data:`NONE` (values where the verdict is ``gain established``: ``held_at``).
    """

    axis: str
    preset: str
    budget_tokens: int
    fixed: tuple[tuple[str, str], ...]
    comparison: str
    points: tuple[AxisPoint, ...]
    slope: float
    held_at: tuple[str, ...]

    @property
    def holds(self) -> str:
        n = len(self.held_at)
        return EVERY if n == len(self.points) else NONE if n == 0 else SOME


def across_axes(headlines, comparisons) -> tuple[AxisLine, ...]:
    """One :class:`AxisLine` per axis and group of cells differing in that axis only (two values or more).

    Args:
        headlines: the report's :class:`harness.report.stats.results.Headline` rows (one per cell).
        comparisons: the report's :class:`harness.report.stats.results.Comparison` rows (their descriptives
            give each cell's interval).
    """
    desc = {(c.size, c.budget_tokens): c.stats for c in comparisons if c.kind == "treatment_vs_parent"}
    groups: dict[tuple, list] = {}
    for h in headlines:
        if AXIS_SEP not in h.size:
            continue
        preset, axes = split_cell_size(h.size)
        for i, (key, value) in enumerate(axes):
            fixed = axes[:i] + axes[i + 1 :]
            groups.setdefault((key, preset, h.budget_tokens, fixed, h.comparison), []).append((value, h))
    out = []
    for (key, preset, budget, fixed, comparison), rows in groups.items():
        if len(rows) < 2:
            continue
        rows.sort(key=lambda vh: cell_order((vh[1].size, vh[1].budget_tokens)))
        points = []
        for value, h in rows:
            d = desc.get((h.size, h.budget_tokens))
            lo, hi = (d.ci_low, d.ci_high) if d is not None else (float("nan"), float("nan"))
            points.append(AxisPoint(value, h.size, budget, h.n, h.mean, lo, hi, h.verdict, h.established))
        out.append(
            AxisLine(
                axis=key,
                preset=preset,
                budget_tokens=budget,
                fixed=fixed,
                comparison=comparison,
                points=tuple(points),
                slope=_slope(points),
                held_at=tuple(p.value for p in points if p.established),
            )
        )
    return tuple(out)


def _slope(points: list[AxisPoint]) -> float:
    """Least-squares slope of the means on log2(value): nats/token per doubling; NaN where it cannot be drawn."""
    try:
        x = [float(p.value) for p in points]
    except ValueError:
        return float("nan")
    pts = [(np.log2(v), p.mean) for v, p in zip(x, points, strict=True) if v > 0 and np.isfinite(p.mean)]
    if len(pts) < 2 or len(pts) != len(points) or len({a for a, _ in pts}) < 2:
        return float("nan")
    a, b = np.array(pts).T
    return float(np.polyfit(a, b, 1)[0])


__all__ = ["EVERY", "NONE", "SOME", "AxisLine", "AxisPoint", "across_axes"]
