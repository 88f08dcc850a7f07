"""Does an established verdict survive dropping any one seed? (descriptive; DESIGN section 6's verdicts)

For every established verdict of a grid (a headline ``gain established``, a control's ``does not
reproduce gain`` / ``reproduces gain``, an established factorial contrast), the same analysis is run
n more times, each without one seed (that seed's runs dropped in every cell, so every family is
recomputed as it would have been without it), and the verdict's Holm p is read in each. The result
is the largest of those n Holm p and the seed whose absence gives it, and whether the verdict is the
same in all n analyses. This is a sensitivity check for a reader ("without seed 7 the Holm p is
0.054"): it enters no family and changes no verdict.

With looks (DESIGN section 8) each look tests the first n_k seeds; without seed s, a look whose first
n_k seeds held s tests n_k - 1 (the same seeds minus s), its level spent from the looks so shrunk
(t = 11/23 instead of 12/24 at the first of looks 12 and 24), so the analysis without s is the planned
one minus s, not an earlier look.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import polars as pl

from harness.design.analysis_plan import AnalysisPlan
from harness.report.stats.decisions import DOES_NOT_REPRODUCE, REPRODUCES
from harness.report.stats.results import ReportStats

HEADLINE, CONTROL, FACTORIAL = "headline", "control", "factorial"


@dataclass(frozen=True, slots=True)
class SeedInfluence:
    """One established verdict under leave-one-seed-out (module docstring).

    Attributes:
        kind: ``headline``, ``control`` or ``factorial``.
        comparison: the stats.csv ``comparison`` label of the verdict's row.
        size, budget_tokens: its cell.
        verdict: the verdict with every seed.
        holm_p: its Holm p with every seed.
        max_holm_p: the largest Holm p over the n analyses without one seed (NaN: untested there).
        worst_seed: the seed whose absence gives ``max_holm_p``.
        survives: the verdict is the same in all n analyses.
        analyses: n, the seeds dropped one at a time.
    """

    kind: str
    comparison: str
    size: str
    budget_tokens: int
    verdict: str
    holm_p: float
    max_holm_p: float
    worst_seed: int
    survives: bool
    analyses: int


def _verdict_rows(stats: ReportStats) -> dict[tuple[str, str, str, int], tuple[str, float, bool]]:
    """``(kind, comparison, size, budget) -> (verdict, holm_p, established)`` of every verdict-bearing row."""
    out = {}
    for h in stats.headlines:
        out[(HEADLINE, h.comparison, h.size, h.budget_tokens)] = (h.verdict, h.holm_p, h.established)
    for a in stats.assessments:
        key = (CONTROL, f"{a.control} - {stats.parent}", a.size, a.budget_tokens)
        out[key] = (a.verdict, a.holm_p, a.verdict in (DOES_NOT_REPRODUCE, REPRODUCES))
    for cell in stats.factorial:
        for c in cell.contrasts:
            key = (FACTORIAL, c.comparison.comparison, cell.size, cell.budget_tokens)
            out[key] = (c.verdict, c.holm_p, c.established)
    return out


def _looks_without(plan: AnalysisPlan, seeds: list[int], dropped: int) -> AnalysisPlan:
    """The plan's looks without ``dropped``: a look whose first n_k seeds (``seeds`` sorted) held it
    tests n_k - 1 (module docstring)."""
    if not plan.looks:
        return plan
    rank = seeds.index(dropped)
    return dataclasses.replace(plan, looks=tuple(n - 1 if rank < n else n for n in plan.looks))


def leave_one_seed_out(
    stats: ReportStats,
    final: pl.DataFrame,
    runs: pl.DataFrame,
    analyze: Callable[..., ReportStats],
) -> tuple[SeedInfluence, ...]:
    """Every established verdict of ``stats`` under leave-one-seed-out (module docstring).

    Args:
        stats: the full analysis (its plan is reused; looks as in the module docstring).
        final, runs: the frames it was computed from (``seed`` column).
        analyze: ``analyze(final, runs, plan=...) -> ReportStats``, the same analysis with everything
            but the frames fixed (e.g. :func:`harness.report.stats.analysis.analyze` with the grid's degenerate
            variants), so that nothing but the dropped seed differs.

    Returns:
        One :class:`SeedInfluence` per established verdict, in report order; () when none is established
        or the grid has fewer than 2 seeds.
    """
    established = {k: (v, p) for k, (v, p, est) in _verdict_rows(stats).items() if est}
    seeds = sorted({int(s) for s in final["seed"].to_list()}) if final.height else []
    if not established or len(seeds) < 2:
        return ()
    worst = {key: (-math.inf, seeds[0]) for key in established}
    same = dict.fromkeys(established, True)
    for s in seeds:
        without = analyze(
            final.filter(pl.col("seed") != s),
            runs.filter(pl.col("seed") != s),
            plan=_looks_without(stats.plan, seeds, s),
        )
        found = _verdict_rows(without)
        for key, (verdict, _) in established.items():
            v, p, _ = found.get(key, ("", math.nan, False))
            same[key] &= v == verdict
            p_cmp = np.inf if math.isnan(p) else p  # untested without the seed: as bad as it gets
            if p_cmp > worst[key][0]:
                worst[key] = (p_cmp, s)
    return tuple(
        SeedInfluence(
            kind=key[0],
            comparison=key[1],
            size=key[2],
            budget_tokens=key[3],
            verdict=verdict,
            holm_p=holm_p,
            max_holm_p=math.nan if math.isinf(worst[key][0]) else float(worst[key][0]),
            worst_seed=worst[key][1],
            survives=same[key],
            analyses=len(seeds),
        )
        for key, (verdict, holm_p) in established.items()
    )


def influence_text(i: SeedInfluence) -> str:
    """'survives dropping any one seed (largest Holm p 0.012, without seed 3)' / 'does not survive
    dropping seed 7 (Holm p 0.054 without it)'."""
    p = "untested" if math.isnan(i.max_holm_p) else f"{i.max_holm_p:.3g}"
    if i.survives:
        return f"survives dropping any one of its {i.analyses} seeds (largest Holm p {p}, without seed {i.worst_seed})"
    return f"does not survive dropping seed {i.worst_seed} (Holm p {p} without it; {i.analyses} seeds)"


__all__ = ["SeedInfluence", "leave_one_seed_out", "influence_text", "HEADLINE", "CONTROL", "FACTORIAL"]
