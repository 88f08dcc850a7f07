"""The A/A check of DESIGN section 6: a variant equal to the parent in exact arithmetic.

Per cell, the max |d| against the noise threshold (a fraction of the treatment's gain) and a
two-sided offset test, Holm over the cells; FAIL needs the Holm p below alpha and a mean offset
beyond the float32 rounding of the NLL (:func:`harness.report.stats.floors.aa_floor`). In no control family.
"""

from __future__ import annotations

import math

import numpy as np

from harness.report.stats import decisions as dec
from harness.report.stats import paired_tests as paired
from harness.report.stats.divergence import LostSeeds, TestedDiffs
from harness.report.stats.floors import aa_floor, beyond_floor, verdict_mean
from harness.report.stats.results import (
    AA_NOISE_ABS,
    AA_NOISE_FRACTION,
    NAN,
    AACheck,
    Comparison,
    Headline,
)


def _aa_check(
    c: Comparison,
    t: TestedDiffs,
    gain: float,
    alpha: float,
    steps: tuple[int, ...],
    holm_p: float,
    n_cells: int,
    floor: float,
) -> AACheck:
    """DESIGN 6 A/A check of comparison ``c`` with tested differences ``t`` (observed, and the A/A
    variant's lost seeds as losses) and the Holm p of its offset test over the cells (see :class:`AACheck`).
    FAIL needs Holm p < alpha and a mean offset beyond ``floor`` (the float32 rounding of the NLL)."""
    d = t.d
    threshold = AA_NOISE_FRACTION * abs(gain) if math.isfinite(gain) else AA_NOISE_ABS
    max_abs = float(np.max(np.abs(d))) if d.size else NAN
    tested = d.size >= paired.MIN_PAIRS
    p, exact = dec.two_sided_p(d) if tested else (np.array(NAN), np.array(False))
    p, exact = float(p), bool(exact)
    mean = verdict_mean(d, floor) if d.size else NAN  # exact against the floor
    if not d.size:
        status = "no pairs"
    elif max_abs == 0.0:
        status = "bit-identical"
    elif tested and holm_p < alpha and bool(beyond_floor(mean, floor)):
        status = "FAIL"
    elif max_abs >= threshold:
        status = "warn"
    else:
        status = "pass"
    return AACheck(
        variant=c.first,
        size=c.size,
        budget_tokens=c.budget_tokens,
        n=int(d.size),
        max_abs=max_abs,
        mean=mean,
        p=p,
        exact=exact,
        tested=tested,
        status=status,
        gain=gain,
        threshold=threshold,
        steps=steps,
        holm_p=holm_p,
        n_cells=n_cells,
        floor=floor,
        imputed=t.imputed,
    )


def aa_checks(
    comparisons: list[Comparison],
    sets: dict,
    headlines: dict[tuple[str, int], Headline],
    steps_of: dict[str, int],
    alpha: float,
    lost: LostSeeds,
) -> list[AACheck]:
    """The A/A check of every ``aa_check`` comparison, against its cell's treatment gain; the offset
    tests Holm over the cells (DESIGN 6)."""
    checked = [c for c in comparisons if c.kind == "aa_check"]
    tested = [lost.tested(sets[(c.comparison, c.size, c.budget_tokens)]) for c in checked]
    p = np.array([float(dec.two_sided_p(t.d)[0]) if t.d.size >= paired.MIN_PAIRS else NAN for t in tested])
    holm_p = dec.holm(p) if checked else np.zeros(0)
    n_cells = int(np.isfinite(holm_p).sum())
    aa = []
    for c, t, hp in zip(checked, tested, holm_p):
        ps = sets[(c.comparison, c.size, c.budget_tokens)]
        h = headlines.get((c.size, c.budget_tokens))
        steps = tuple(
            sorted({steps_of[r] for p in ps.pairs for r in (p.run_first, p.run_second) if r in steps_of})
        )
        floor = aa_floor([v for p in ps.pairs for v in (p.nll_first, p.nll_second)])
        aa.append(_aa_check(c, t, h.mean if h and h.n else NAN, alpha, steps, float(hp), n_cells, floor))
    return aa
