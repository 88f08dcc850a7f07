"""Gain vs budget (DESIGN section 8): how each paired difference moves as the training budget grows.

For a grid with several budgets, per size and comparison with the parent (treatment -
parent, each control - parent, the A/A check): the mean paired difference d (nats/token)
with its 95 % t interval at every budget (taken from the report's descriptives, not
recomputed), and, descriptively, the slope of d on log2(budget) from the mixed model

    d ~ log2(budget) + (1 | seed)

(statsmodels mixedlm, REML, :func:`harness.report.stats.mixed.fit_reml`): the change of d per doubling
of the budget, with its Wald 95 % interval. The random intercept per seed carries what a
seed's data order and initialisation do at every budget. In a balanced design (every
seed at every budget) the slope equals the ordinary least-squares slope of d on
log2(budget). It is descriptive: no verdict rests on it, and with few budgets it is a
line through few points.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from harness.report.stats.mixed import MixedCoef, fit_reml, fixed_effect

KINDS = ("treatment_vs_parent", "control_vs_parent", "aa_check")
NAN = float("nan")
CONSTANT = "not fitted: every paired difference is"


@dataclass(frozen=True, slots=True)
class BudgetPoint:
    """Mean paired difference of one comparison at one size and budget (nats/token, 95 % t interval)."""

    comparison: str
    kind: str
    size: str
    budget_tokens: int
    n: int
    mean: float
    ci_low: float
    ci_high: float


@dataclass(frozen=True, slots=True)
class BudgetSlope:
    """Slope of d on log2(budget) for one comparison at one size, from ``d ~ log2(budget) + (1 | seed)``.

    ``coef`` is the fixed effect of log2(budget): ``estimate`` in nats/token per doubling of the
    budget, Wald SE, 95 % interval and z p; None when not fitted (``error``). ``warnings`` holds
    every warning statsmodels raised (boundary fits are common with few seeds).
    """

    comparison: str
    kind: str
    size: str
    budgets: tuple[int, ...]
    n_obs: int
    n_seeds: int
    coef: MixedCoef | None
    warnings: tuple[str, ...] = ()
    error: str = ""

    @property
    def slope(self) -> float:
        """nats/token per doubling (0 when every d is equal, NaN when not fitted otherwise)."""
        return (
            self.coef.estimate if self.coef is not None else 0.0 if self.error.startswith(CONSTANT) else NAN
        )


@dataclass(frozen=True, slots=True)
class GainVsBudget:
    """Every point and slope of a grid; empty when no size has two budgets."""

    points: tuple[BudgetPoint, ...]
    slopes: tuple[BudgetSlope, ...]


def _slope(comparison: str, kind: str, size: str, budgets: list[int], pairs) -> BudgetSlope:
    d = [p.diff for p in pairs]
    seeds = [p.seed for p in pairs]
    base = BudgetSlope(
        comparison=comparison,
        kind=kind,
        size=size,
        budgets=tuple(budgets),
        n_obs=len(d),
        n_seeds=len(set(seeds)),
        coef=None,
    )
    if len(d) < 3:
        return replace(base, error=f"not fitted: {len(d)} pair(s)")
    if np.ptp(d) == 0:  # the A/A check when bit-identical: nothing varies, nothing to fit
        return replace(base, error=f"{CONSTANT} {d[0]:g}")
    x = np.log2([p.budget_tokens for p in pairs])
    res, msgs, error = fit_reml("y ~ log2_budget", d, {"log2_budget": x}, seeds)
    if res is None:
        return replace(base, warnings=msgs, error=error)
    return replace(base, coef=fixed_effect(res, "log2_budget", "log2(budget)"), warnings=msgs)


def gain_vs_budget(comparisons, pairs) -> GainVsBudget:
    """Points and slopes for every (size, comparison with the parent) seen at two or more budgets.

    Args:
        comparisons: the report's :class:`harness.report.stats.analysis.Comparison` rows (kind, size, budget, descriptives).
        pairs: the report's :class:`harness.report.stats.pairing.Pair` rows.
    """
    groups: dict[tuple[str, str], list] = {}
    for c in comparisons:
        if c.kind in KINDS:
            groups.setdefault((c.size, c.comparison), []).append(c)
    points, slopes = [], []
    for (size, comparison), comps in groups.items():
        budgets = sorted({c.budget_tokens for c in comps})
        if len(budgets) < 2:
            continue
        comps = sorted(comps, key=lambda c: c.budget_tokens)
        points += [
            BudgetPoint(
                comparison=comparison,
                kind=c.kind,
                size=size,
                budget_tokens=c.budget_tokens,
                n=c.stats.n,
                mean=c.stats.mean,
                ci_low=c.stats.ci_low,
                ci_high=c.stats.ci_high,
            )
            for c in comps
        ]
        slopes.append(
            _slope(
                comparison,
                comps[0].kind,
                size,
                budgets,
                [p for p in pairs if (p.comparison, p.size) == (comparison, size)],
            )
        )
    return GainVsBudget(tuple(points), tuple(slopes))


__all__ = ["BudgetPoint", "BudgetSlope", "GainVsBudget", "gain_vs_budget"]
