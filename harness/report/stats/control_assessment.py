"""Step 2 of DESIGN section 6: do the controls reproduce the gain?

Where the headline established the gain, each control's reproduction contrast
``e = c - (1 - rho) p - rho t`` is tested two-sided at its cell's look, Holm over every assessed
(cell, control) contrast of the grid (:func:`harness.report.stats.decisions.decide_controls`), with the
fraction of the gain reproduced (Fieller interval). ``invalid: degenerate`` takes precedence over
every verdict. The result per (cell, control) is a :class:`~harness.report.stats.results.ControlAssessment`.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from harness.design.analysis_plan import AnalysisPlan
from harness.report.stats import decisions as dec
from harness.report.stats import paired_tests as paired
from harness.report.stats.descriptives import sample_sd
from harness.report.stats.divergence import LostSeeds, TestedDiffs, contrast_losses, worst_case
from harness.report.stats.power import contrast_effect, look_mde, planned_seeds
from harness.report.stats.results import (
    NAN,
    R_DEGENERATE,
    R_FEW,
    R_FLOOR,
    R_HOLM,
    R_NO_GAIN,
    R_NO_LOOK,
    R_NO_TREATMENT,
    R_SIGNIFICANT,
    ControlAssessment,
    Headline,
)
from harness.report.stats.sequential import SequentialTest as _SequentialTest
from harness.report.stats.sequential import sequential_test as _sequential


class _ContrastInput(NamedTuple):
    """One control's reproduction contrast in one cell and its test, before Holm over the grid's contrasts."""

    control: str
    size: str
    budget: int
    head: Headline | None
    x: np.ndarray  # control - parent, observed seeds
    y: np.ndarray  # treatment - parent, same seeds
    tested: TestedDiffs  # the contrast e, plus lost seeds counted as losses (harness.report.stats.divergence)
    test: _SequentialTest
    degenerate: str


def assess_controls(
    cells, controls, sets, treatment, parent, degen, plan: AnalysisPlan, headlines, lost: LostSeeds
) -> list[ControlAssessment]:
    """Step 2 for the controls of every cell: contrasts, Holm over every assessed (cell, control)
    contrast of the grid (DESIGN 6 "families across the grid"), verdicts."""
    rows = [
        r
        for size, budget in cells
        for r in _contrasts(
            size, budget, controls, sets, treatment, parent, degen, plan, headlines.get((size, budget)), lost
        )
    ]
    if not rows:
        return []
    established = np.array([r.head is not None and r.head.established for r in rows])
    adj, codes = dec.decide_controls(
        established,
        np.array([bool(r.degenerate) for r in rows]),
        np.array([r.test.look.n for r in rows]),
        np.array([r.test.deciding_mean for r in rows]),
        np.array([r.test.sequential_p for r in rows]),
        plan.alpha,
    )
    fam = int(np.isfinite(adj).sum())
    return [_assessment(r, float(hp), int(code), fam, plan) for r, hp, code in zip(rows, adj, codes)]


def _contrasts(
    size,
    budget,
    controls,
    sets,
    treatment,
    parent,
    degen,
    plan: AnalysisPlan,
    head: Headline | None,
    lost: LostSeeds,
) -> list[_ContrastInput]:
    """The reproduction contrast of every control of one cell, with its lost seeds as losses."""
    tp = sets.get((f"{treatment} - {parent}", size, budget)) if treatment else None
    d_tp = {p.seed: p.diff for p in tp.pairs} if tp is not None else {}
    names = (parent,) + ((treatment,) if treatment else ())
    rows = []
    for c in controls:
        cp = sets.get((f"{c} - {parent}", size, budget))
        if cp is None:
            continue
        seeds = tuple(p.seed for p in cp.pairs if p.seed in d_tp)
        x = np.array([p.diff for p in cp.pairs if p.seed in d_tp])
        y = np.array([d_tp[s] for s in seeds])
        e = dec.reproduction_contrast(x, y, plan.reproduce_fraction)
        losses, dropped = (
            contrast_losses(
                c,
                treatment,
                {v: lost.of(v, size, budget) for v in (c, *names)},
                {v: lost.done(v, size, budget) for v in (c, *names)},
                parent,
            )
            if treatment
            else ({}, [])
        )
        tested = worst_case(seeds, e, losses, dropped)
        rows.append(
            _ContrastInput(
                control=c,
                size=size,
                budget=budget,
                head=head,
                x=x,
                y=y,
                tested=tested,
                test=_sequential(tested.d, plan, dec.two_sided_p),
                degenerate=degen.get((size, budget, c), ""),
            )
        )
    return rows


def _assessment(r: _ContrastInput, hp: float, code: int, fam: int, plan: AnalysisPlan) -> ControlAssessment:
    """The :class:`ControlAssessment` of one control, given its Holm p, verdict code and family size."""
    established = r.head is not None and r.head.established
    e = r.tested.d
    q, n = r.test, int(e.size)
    mean_e = float(e.mean()) if n else NAN
    p, exact, seq = (q.p, q.exact, q.sequential_p) if math.isfinite(hp) else (NAN, False, NAN)  # untested
    reason = (
        R_DEGENERATE
        if r.degenerate
        else (R_NO_TREATMENT if r.head is None else R_NO_GAIN)
        if not established
        else R_NO_LOOK
        if q.look.before_first
        else R_FEW
        if n < paired.MIN_PAIRS
        else R_SIGNIFICANT
        if code in (dec.V_DOES_NOT, dec.V_REPRODUCES)
        else R_FLOOR
        if hp < plan.alpha
        else R_HOLM
    )
    sd_e = sample_sd(e)
    planned = contrast_effect(plan.min_effect_nats, plan.reproduce_fraction)
    # Step 2 quantities only where step 2 runs (assessed, in the family); Fieller on the observed seeds.
    f = (
        dec.fieller(r.x, r.y)
        if math.isfinite(hp) and r.x.size
        else dict(f=NAN, low=NAN, high=NAN, bounded=False)
    )
    return ControlAssessment(
        control=r.control,
        size=r.size,
        budget_tokens=r.budget,
        n=n,
        seeds=r.tested.seeds,
        contrast_mean=mean_e,
        contrast_sd=sd_e,
        contrast_p=p,
        exact=exact,
        holm_p=hp,
        family_size=fam if math.isfinite(hp) else 0,
        fraction=float(f["f"]),
        fraction_low=float(f["low"]),
        fraction_high=float(f["high"]),
        bounded=bool(f["bounded"]),
        verdict=dec.VERDICTS[code],
        reason=reason,
        degenerate_reason=r.degenerate,
        mde_nats=look_mde(sd_e, n, plan, "two-sided"),
        planned_effect=planned,
        seeds_needed=planned_seeds(planned, sd_e, plan, "two-sided"),
        look=q.look,
        sequential_p=seq,
        imputed=r.tested.imputed,
        dropped=r.tested.dropped,
    )
