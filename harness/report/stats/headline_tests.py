"""Step 1 of DESIGN section 6 for every cell: is the treatment's gain established?

Per cell, the one-sided paired t-test of treatment - parent (H1: gain > 0) and, with
``min_effect_nats`` (delta) in the plan, the absence test (H1: gain < delta), each at the look the
cell has reached (:mod:`harness.report.stats.sequential`); both tests of every cell form one family over
the cells (:func:`harness.report.stats.decisions.decide_headlines`: Holm with Shaffer's divisors). A seed
where one side diverged counts as a loss for it (:mod:`harness.report.stats.divergence`). The result per
cell is a :class:`~harness.report.stats.results.Headline` with its verdict, reason, MDE and seeds needed.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from harness.design.analysis_plan import AnalysisPlan
from harness.report.stats import decisions as dec
from harness.report.stats import paired_tests as paired
from harness.report.stats.descriptives import sample_sd
from harness.report.stats.divergence import LostSeeds, TestedDiffs
from harness.report.stats.floors import FLOOR_NATS, beyond_floor, verdict_mean
from harness.report.stats.power import look_mde, planned_seeds
from harness.report.stats.results import (
    NAN,
    R_ABSENT,
    R_DEGENERATE,
    R_ESTABLISHED,
    R_FEW,
    R_FLOOR,
    R_HOLM,
    R_NO_LOOK,
    R_NOT_BETTER,
    Headline,
)
from harness.report.stats.sequential import SequentialTest as _SequentialTest
from harness.report.stats.sequential import sequential_test as _sequential


class _HeadlineInput(NamedTuple):
    """One cell's tested treatment - parent differences and their tests, before Holm over the cells."""

    size: str
    budget: int
    tested: TestedDiffs  # the pairs plus lost seeds counted as losses (harness.report.stats.divergence)
    test: _SequentialTest  # the headline test (H1: gain > 0)
    absence: _SequentialTest | None  # the absence test (H1: gain < delta); None without min_effect_nats
    degenerate: str


class _HeadlineDecision(NamedTuple):
    """One cell's Holm results: the headline's and the absence test's, and Holm's level for the bound."""

    holm_p: float
    established: bool
    absence_holm_p: float
    absent: bool
    level: float  # Holm's level of the absence test in this cell (NaN: not tested)


def headline_rows(
    cells, sets, treatment, parent, degen, plan: AnalysisPlan, lost: LostSeeds
) -> dict[tuple[str, int], Headline]:
    """Step 1 for every cell with a treatment - parent comparison: established (Holm over the cells),
    absent (the absence test, Holm over the cells) or undecided."""
    if treatment is None:
        return {}
    label, delta = f"{treatment} - {parent}", plan.min_effect_nats
    rows = []
    for size, budget in cells:
        ps = sets.get((label, size, budget))
        if ps is None:
            continue
        tested = lost.tested(ps)
        absence = _sequential(tested.d, plan, dec.absence_test(delta)) if delta is not None else None
        rows.append(
            _HeadlineInput(
                size=size,
                budget=budget,
                tested=tested,
                test=_sequential(tested.d, plan, dec.headline_p),
                absence=absence,
                degenerate=degen.get((size, budget, treatment), ""),
            )
        )
    if not rows:
        return {}
    decisions = _decide_headlines(rows, plan)
    n_cells = int(np.isfinite([x.holm_p for x in decisions]).sum())
    return {(r.size, r.budget): _headline(r, label, x, n_cells, plan) for r, x in zip(rows, decisions)}


def _decide_headlines(rows: list[_HeadlineInput], plan: AnalysisPlan) -> list[_HeadlineDecision]:
    """The headline and absence tests of every cell in one family (DESIGN 6; :func:`dec.decide_headlines`)."""
    absence = [r.absence for r in rows]  # None without min_effect_nats: not tested
    fam = dec.decide_headlines(
        np.array([r.test.look.n for r in rows]),
        np.array([r.test.deciding_mean for r in rows]),
        np.array([r.test.sequential_p for r in rows]),
        np.array([a.deciding_mean if a is not None else NAN for a in absence]),
        np.array([a.sequential_p if a is not None else NAN for a in absence]),
        plan.min_effect_nats,
        plan.alpha,
        np.array([bool(r.degenerate) for r in rows]),
    )
    return [
        _HeadlineDecision(
            holm_p=float(hp),
            established=bool(e),
            absence_holm_p=float(ha),
            absent=bool(a) and not bool(e),
            level=float(lv),
        )
        for hp, e, ha, a, lv in zip(
            fam.holm_p, fam.established, fam.absence_holm_p, fam.absent, fam.absence_level
        )
    ]


def _headline(
    r: _HeadlineInput, label: str, x: _HeadlineDecision, n_cells: int, plan: AnalysisPlan
) -> Headline:
    """The :class:`Headline` of one cell, given its Holm decisions."""
    d, q, qa, degenerate, delta = r.tested.d, r.test, r.absence, r.degenerate, plan.min_effect_nats
    n, mean = int(d.size), float(d.mean()) if d.size else NAN
    look_mean = verdict_mean(d[: q.look.n]) if q.look.n else NAN
    reason = (
        R_DEGENERATE
        if degenerate
        else R_ESTABLISHED
        if x.established
        else R_ABSENT
        if x.absent
        else R_NO_LOOK
        if q.look.before_first
        else R_FEW
        if n < paired.MIN_PAIRS
        else R_NOT_BETTER
        if not look_mean < 0
        else R_FLOOR
        if not bool(beyond_floor(look_mean))
        else R_HOLM
    )
    verdict = dec.DEGENERATE if degenerate else dec.headline_verdict(x.established, x.absent, delta)
    sd = sample_sd(d)
    # The bound on the pairs the current look tests, at Holm's level for this cell (scaled to the look's share).
    bound_level = x.level * (q.look.level / plan.alpha) if qa is not None and math.isfinite(x.level) else NAN
    upper = (
        float(dec.gain_upper_bound(d[: q.look.n], bound_level))
        if math.isfinite(bound_level) and q.look.n >= paired.MIN_PAIRS
        else NAN
    )
    gain, undecided = -mean if n else NAN, verdict == dec.UNDECIDED
    return Headline(
        size=r.size,
        budget_tokens=r.budget,
        comparison=label,
        n=n,
        mean=mean,
        sd=sd,
        p_one_sided=NAN if degenerate else q.p,  # a degenerate treatment is not tested
        exact=q.exact,
        holm_p=x.holm_p,
        n_cells=n_cells,
        level=q.look.level,
        established=x.established,
        verdict=verdict,
        reason=reason,
        degenerate_reason=degenerate,
        mde_nats=look_mde(sd, n, plan, "one-sided"),
        seeds_needed=planned_seeds(delta, sd, plan, "one-sided"),
        look=q.look,
        sequential_p=NAN if degenerate else q.sequential_p,
        decided_look=q.decided_look,
        absent=x.absent,
        absence_p=NAN if degenerate or qa is None else qa.p,
        absence_holm_p=x.absence_holm_p,
        gain_upper=upper,
        gain_upper_level=bound_level,
        seeds=r.tested.seeds,
        imputed=r.tested.imputed,
        dropped=r.tested.dropped,
        seeds_establish=planned_seeds(gain, sd, plan, "one-sided")
        if undecided and gain > FLOOR_NATS
        else None,
        seeds_absent=(
            planned_seeds(delta - gain, sd, plan, "one-sided")
            if undecided and delta is not None and gain < delta
            else None
        ),
    )
