"""The statistics plan of DESIGN section 6, computed for one grid.

Per cell (one size and budget), from final validation NLLs (nats/token) paired by seed
and protocol hash (:mod:`reports.stats.pairing`):

* **Descriptives**, every comparison (treatment - parent, control - parent, treatment -
  control, parent - reference, the A/A check): n, seeds, mean d with its 95 % t interval,
  sd, d_z, wins, perplexity change, two-sided t p, exact sign-flip p, exact Wilcoxon and
  sign test with the smallest p each can reach (:mod:`reports.stats.paired_tests`). Reported, never
  used for a verdict.
* **Headline** (gatekeeper): one-sided t-test of treatment - parent, Holm over the cells;
  *established* where n >= 3, mean d below minus the numerical floor and Holm p < alpha,
  *absent* where the one-sided test of H0 "gain >= min_effect_nats" rejects (Holm over the
  cells), else *undecided* (:mod:`reports.stats.decisions`, :mod:`reports.stats.floors`). A seed
  where one side diverged counts as a loss for it (:mod:`reports.stats.divergence`).
* **Controls**, only where the gain is established: the reproduction contrast
  ``e = c - (1 - rho) p - rho t``, two-sided, Holm over the grid's assessed (cell, control)
  contrasts; the fraction
  of the gain reproduced with its Fieller interval. ``invalid: degenerate`` takes
  precedence over every verdict.
* **A/A check** (in no control family; its offset tests Holm over the cells), **divergence table**, **MDE / seeds needed** from
  the plan's effect (:mod:`reports.stats.power`), the **mixed model** (:mod:`reports.stats.mixed`), and
  **gain vs budget** where a size has several budgets (:mod:`reports.stats.budget`).
* **Factorial attribution** where the plan has a ``[factorial]`` design (DESIGN section 12,
  :mod:`reports.stats.factorial`): simple and main effects and the interaction per cell, Holm over the
  grid's factorial family.
* With **looks** in the plan (DESIGN section 8, :mod:`reports.stats.looks`), the headline and the
  control contrasts are tested at the look each cell has reached, at that look's share of
  alpha; Holm is applied to their sequential p.

:func:`analyze` reads as its steps: keep the grid's rows (:func:`~reports.stats.pairing.of_grid`), split off
the ``[tuned]`` runs, pair, describe each comparison (:func:`_comparisons`), collect degenerate
variants (:func:`_degeneracy`), decide the headlines (:func:`_headlines`) and the controls
(:func:`_assess`), the A/A checks (:func:`_aa_checks`), the mixed models, the robustness rows and
gain vs budget. Results are the frozen dataclasses of :mod:`reports.stats.results` (re-exported here);
:meth:`ReportStats.to_frame` is ``stats.csv``. Notes are short fixed tags (``NOTE_*``);
:mod:`reports.render.sections` words everything for people.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import NamedTuple

import numpy as np
import polars as pl

from harness.analysis_plan import AnalysisPlan, plan_from_configs
from reports.stats import decisions as dec
from reports.stats import paired_tests as paired
from reports.stats.budget import gain_vs_budget
from reports.stats.descriptives import describe
from reports.stats.divergence import LostSeeds, TestedDiffs, contrast_losses, worst_case
from reports.stats.factorial import factorial_cells
from reports.stats.floors import FLOOR_NATS, aa_floor, beyond_floor, within_floor_everywhere
from reports.stats.mixed import fit_mixed_model
from reports.stats.pairing import AA_VARIANTS, PairedSet, cell_order, of_grid, pair_runs, steps_by_run
from reports.stats.plateau import plateau_rows
from reports.stats.power import contrast_effect, look_mde, planned_seeds
from reports.stats.progress import GridProgress, grid_progress
from reports.stats.results import (  # noqa: F401 (re-exported: the result objects are part of this module's API)
    AA_NOISE_ABS,
    AA_NOISE_FRACTION,
    AA_STATUSES,
    ALL_ZERO_REASON,
    CSV_COLUMNS,
    EXTRA_COLUMNS,
    KINDS,
    NAN,
    NOTE_BETWEEN,
    NOTE_DEGENERATE,
    NOTE_EARLIER,
    NOTE_FEW,
    NOTE_LOST,
    NOTE_NO_EFFECT,
    NOTE_NO_LOOK,
    NOTE_UNBOUNDED,
    NOTE_UNREACHABLE,
    NOTE_ZERO_SPREAD,
    NOTE_ZEROS,
    R_ABSENT,
    R_DEGENERATE,
    R_ESTABLISHED,
    R_FEW,
    R_FLOOR,
    R_HOLM,
    R_NO_GAIN,
    R_NO_LOOK,
    R_NO_TREATMENT,
    R_NOT_BETTER,
    R_SIGNIFICANT,
    AACheck,
    Comparison,
    ControlAssessment,
    Descriptives,
    DivergenceRow,
    Headline,
    ReportStats,
)
from reports.stats.robustness import split_tuned, tuned_rows
from reports.stats.sequential import SequentialTest as _SequentialTest
from reports.stats.sequential import sequential_test as _sequential


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
    mean = float(d.mean()) if d.size else NAN
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


def _divergence(pairing, cells) -> list[DivergenceRow]:
    variants = [
        pairing.parent,
        *([pairing.treatment] if pairing.treatment else []),
        *pairing.controls,
        *pairing.references,
    ]
    out = []
    for size, budget in cells:
        sub = pairing.usable.filter((pl.col("size") == size) & (pl.col("budget_tokens") == budget))
        for v in variants:
            done = sub.filter(pl.col("variant") == v).height
            lo = [
                x
                for x in pairing.left_out
                if (x.variant, x.size, x.budget_tokens) == (v, size, budget) and x.status != "pair"
            ]
            div = tuple(sorted(x.seed for x in lo if x.status == "diverged"))
            fail = tuple(sorted(x.seed for x in lo if x.status == "failed"))
            other = len(lo) - len(div) - len(fail)
            if done or lo:
                out.append(
                    DivergenceRow(
                        size=size,
                        budget_tokens=budget,
                        variant=v,
                        done=done,
                        diverged=len(div),
                        failed=len(fail),
                        unfinished=other,
                        diverged_seeds=div,
                        failed_seeds=fail,
                    )
                )
    return out


def analyze(
    final: pl.DataFrame,
    runs: pl.DataFrame,
    *,
    grid: str | None = None,
    allow_partial: bool = False,
    plan: AnalysisPlan | None = None,
    degenerate: Mapping[tuple[str, int, str], str] | None = None,
    aa_variants: tuple[str, ...] = AA_VARIANTS,
    progress: GridProgress | None = None,
) -> ReportStats:
    """Pair runs by seed and compute DESIGN section 6 for one grid.

    Args:
        final: one row per finished run: run_id, variant, role, seed, size,
            budget_tokens, protocol_hash, val_nll (nats/token) [, grid].
        runs: one row per run (any status): run_id, variant, role, seed, size,
            budget_tokens, protocol_hash, status [, error, code_version, config, grid].
        grid: keep only rows of this grid (where the frame has a ``grid`` column).
        allow_partial: protocol mismatches and duplicated runs become warnings.
        plan: the analysis plan; default: the one stored in the runs' configs
            (:func:`harness.analysis_plan.plan_from_configs`), else the defaults.
        degenerate: ``{(size, budget_tokens, variant): reason}`` of degenerate variants
            (reports/stats/degeneracy.py, from routing records); a control whose paired
            differences with the parent are within the numerical floor at every seed is added here.
            A/A checks are exempt (they must be identical).
        aa_variants: variants that are A/A checks (never in a family, never a verdict).
        progress: how far the grid has got, the queue's view next to the store's
            (:func:`reports.stats.progress.grid_progress`); default: the store's runs only,
            the queue marked as not read.

    Raises:
        ValueError, ProtocolMismatchError: see :func:`reports.stats.pairing.pair_runs`; runs
            carrying different analysis plans.
    """
    final, runs = of_grid(final, grid), of_grid(runs, grid)
    runs_all = runs
    # The [tuned] runs are split off first: they pair only in the robustness row.
    final, runs, tuned_final, tuned_runs = split_tuned(final, runs)
    pairing = pair_runs(final, runs, grid=grid, allow_partial=allow_partial, aa_variants=aa_variants)
    plan = (
        plan
        if plan is not None
        else plan_from_configs(runs["config"].to_list() if "config" in runs.columns else [])
    )
    aa_set = tuple(v for v in pairing.controls if v in aa_variants)
    controls = tuple(v for v in pairing.controls if v not in aa_variants)
    sets = {(s.comparison, s.size, s.budget_tokens): s for s in pairing.sets}
    comparisons = _comparisons(pairing, aa_set)
    warn = list(pairing.warnings)
    degen = _degeneracy(comparisons, sets, degenerate or {}, aa_set, warn)
    cells = sorted({(s.size, s.budget_tokens) for s in pairing.sets}, key=cell_order)
    t = pairing.treatment
    lost = LostSeeds.of_pairing(pairing)
    headlines = _headlines(cells, sets, t, pairing.parent, degen, plan, lost)
    assessments = _assess(cells, controls, sets, t, pairing.parent, degen, plan, headlines, lost)
    aa = _aa_checks(comparisons, sets, headlines, steps_by_run(runs), plan.alpha, lost)
    factorial = factorial_cells(pairing.usable, cells, plan, lost, allow_partial=allow_partial, warn=warn)
    mixed = _mixed_models(pairing, warn)
    if progress is None:
        progress = grid_progress(runs_all, None, grid=grid, queue_note="the queue was not read")
    robust, robust_left = tuned_rows(
        tuned_final, tuned_runs, pairing.parent, t, {k: h.mean for k, h in headlines.items()}
    )
    budget = gain_vs_budget(comparisons, pairing.pairs)
    comparisons += [r.comparison for r in robust]
    return ReportStats(
        grid=grid or "",
        plan=plan,
        parent=pairing.parent,
        treatment=t,
        controls=controls,
        aa_variants=aa_set,
        references=pairing.references,
        comparisons=tuple(comparisons),
        headlines=tuple(headlines.values()),
        assessments=tuple(assessments),
        aa_checks=tuple(aa),
        divergence=tuple(_divergence(pairing, cells)),
        pairs=pairing.pairs + tuple(p for r in robust for p in r.pairs),
        left_out=pairing.left_out + tuple(robust_left),
        mixed=tuple(mixed),
        warnings=tuple(warn),
        progress=progress,
        budget=budget,
        robustness=tuple(robust),
        plateau=plateau_rows(final, runs),
        factorial=factorial,
    )


def _mixed_models(pairing, warn: list[str]) -> list:
    """The mixed-model cross-check of every cell (:func:`reports.stats.mixed.fit_mixed_model`); its warnings
    go to ``warn``."""
    mixed = [fit_mixed_model(pairing.usable, size, budget, pairing.parent) for size, budget in pairing.cells]
    warn += [
        f"mixed model size={m.size} budget_tokens={m.budget_tokens}: {w}" for m in mixed for w in m.warnings
    ]
    return mixed


def _comparisons(pairing, aa_set: tuple[str, ...]) -> list[Comparison]:
    """One :class:`Comparison` per paired set; a control that is an A/A check is of kind ``aa_check``."""
    out = []
    for s in pairing.sets:
        kind = "aa_check" if s.kind == "control_vs_parent" and s.first in aa_set else s.kind
        out.append(
            Comparison(
                comparison=s.comparison,
                first=s.first,
                second=s.second,
                kind=kind,
                size=s.size,
                budget_tokens=s.budget_tokens,
                seeds=s.seeds,
                stats=describe([p.diff for p in s.pairs]),
                missing=s.missing,
                code_versions=s.code_versions,
            )
        )
    return out


def _degeneracy(
    comparisons: list[Comparison],
    sets: dict,
    given: Mapping[tuple[str, int, str], str],
    aa_set: tuple[str, ...],
    warn: list[str],
) -> dict[tuple[str, int, str], str]:
    """``(size, budget, variant) -> reason``: the given mapping (A/A checks exempt, unknown cells warned
    about in ``warn``), plus every control whose paired differences with the parent are within the
    numerical floor at every seed (:func:`reports.stats.floors.within_floor_everywhere`)."""
    degen = {}
    known = {(c.size, c.budget_tokens, c.first) for c in comparisons} | {
        (c.size, c.budget_tokens, c.second) for c in comparisons
    }
    for key, reason in given.items():
        _size, _budget, variant = key
        if variant in aa_set:
            continue
        if tuple(key) not in known:
            warn.append(f"degeneracy given for {key}, which is not a variant of a cell of this grid: ignored")
            continue
        degen[tuple(key)] = str(reason)
    for c in comparisons:  # within the numerical floor of the parent at every seed: no test can mean anything
        ps = sets[(c.comparison, c.size, c.budget_tokens)]
        if c.kind == "control_vs_parent" and within_floor_everywhere(_diffs(ps)):
            key = (c.size, c.budget_tokens, c.first)
            degen[key] = "; ".join(x for x in (degen.get(key), ALL_ZERO_REASON.format(floor=FLOOR_NATS)) if x)
    return degen


def _aa_checks(
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


def _sd(d: np.ndarray) -> float:
    """Sample SD (ddof 1); 0 at zero spread (:func:`reports.stats.paired_tests.zero_spread`); NaN below 2 values."""
    return NAN if d.size < 2 else 0.0 if bool(paired.zero_spread(d)) else float(np.std(d, ddof=1))


def _diffs(ps: PairedSet | None) -> np.ndarray:
    return np.array([p.diff for p in ps.pairs]) if ps is not None else np.zeros(0)


class _HeadlineInput(NamedTuple):
    """One cell's tested treatment - parent differences and their tests, before Holm over the cells."""

    size: str
    budget: int
    tested: TestedDiffs  # the pairs plus lost seeds counted as losses (reports.stats.divergence)
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


def _headlines(
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
    look_mean = float(d[: q.look.n].mean()) if q.look.n else NAN
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
    sd = _sd(d)
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


class _ContrastInput(NamedTuple):
    """One control's reproduction contrast in one cell and its test, before Holm over the grid's contrasts."""

    control: str
    size: str
    budget: int
    head: Headline | None
    x: np.ndarray  # control - parent, observed seeds
    y: np.ndarray  # treatment - parent, same seeds
    tested: TestedDiffs  # the contrast e, plus lost seeds counted as losses (reports.stats.divergence)
    test: _SequentialTest
    degenerate: str


def _assess(
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
    sd_e = _sd(e)
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
