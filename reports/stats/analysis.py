"""The statistics plan of DESIGN section 6, computed for one grid.

Per cell (one size and budget), from final validation NLLs (nats/token) paired by seed
and protocol hash (:mod:`reports.stats.pairing`):

* **Descriptives**, every comparison (treatment - parent, control - parent, treatment -
  control, parent - reference, the A/A check): n, seeds, mean d with its 95 % t interval,
  sd, d_z, wins, perplexity change, two-sided t p, exact sign-flip p, exact Wilcoxon and
  sign test with the smallest p each can reach (:mod:`reports.stats.paired_tests`). Reported, never
  used for a verdict.
* **Headline** (gatekeeper): one-sided t-test of treatment - parent, Holm over the cells;
  *established* where n >= 3, mean d < 0 and Holm p < alpha (:mod:`reports.stats.decisions`).
* **Controls**, only where the gain is established: the reproduction contrast
  ``e = c - (1 - rho) p - rho t``, two-sided, Holm over the cell's controls; the fraction
  of the gain reproduced with its Fieller interval. ``invalid: degenerate`` takes
  precedence over every verdict.
* **A/A check** (outside every family), **divergence table**, **MDE / seeds needed** from
  the plan's effect (:mod:`reports.stats.power`), the **mixed model** (:mod:`reports.stats.mixed`), and
  **gain vs budget** where a size has several budgets (:mod:`reports.stats.budget`).
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
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import polars as pl

from reports.stats import decisions as dec
from reports.stats import paired_tests as paired
from reports.stats.budget import gain_vs_budget
from reports.stats.mixed import fit_mixed_model
from reports.stats.pairing import AA_VARIANTS, PairedSet, cell_order, of_grid, pair_runs, steps_by_run
from reports.stats.looks import Look, at_looks, look_at, sequential_p
from harness.analysis_plan import AnalysisPlan, plan_from_configs
from reports.stats.power import contrast_effect, look_mde, planned_seeds
from reports.stats.descriptives import describe
from reports.stats.progress import GridProgress, grid_progress
from reports.stats.robustness import split_tuned, tuned_rows
from reports.stats.results import (  # re-exported: the result objects are part of this module's API
    NAN, AA_NOISE_FRACTION, AA_NOISE_ABS, AA_STATUSES, CSV_COLUMNS, EXTRA_COLUMNS, KINDS, NOTE_FEW,
    NOTE_ZERO_SPREAD, NOTE_ZEROS, NOTE_LOST, NOTE_UNBOUNDED, NOTE_NO_EFFECT, NOTE_UNREACHABLE, NOTE_DEGENERATE,
    NOTE_NO_LOOK, NOTE_BETWEEN, NOTE_EARLIER, ALL_ZERO_REASON, R_ESTABLISHED, R_FEW, R_NOT_BETTER, R_HOLM,
    R_DEGENERATE, R_NO_GAIN, R_SIGNIFICANT, R_NO_TREATMENT, R_NO_LOOK, Descriptives, Comparison, Headline,
    ControlAssessment, AACheck, DivergenceRow, ReportStats,
)

def _aa_check(c: Comparison, d: np.ndarray, gain: float, alpha: float, steps: tuple[int, ...]) -> AACheck:
    """DESIGN 6 A/A check of comparison ``c`` with differences ``d`` (see :class:`AACheck`)."""
    threshold = AA_NOISE_FRACTION * abs(gain) if math.isfinite(gain) else AA_NOISE_ABS
    max_abs = float(np.max(np.abs(d))) if d.size else NAN
    tested = d.size >= paired.MIN_PAIRS
    p, exact = dec.two_sided_p(d) if tested else (np.array(NAN), np.array(False))
    p, exact = float(p), bool(exact)
    if not d.size:
        status = "no pairs"
    elif max_abs == 0.0:
        status = "bit-identical"
    elif tested and p < alpha:
        status = "FAIL"
    elif max_abs >= threshold:
        status = "warn"
    else:
        status = "noise floor"
    return AACheck(variant=c.first, size=c.size, budget_tokens=c.budget_tokens, n=int(d.size), max_abs=max_abs,
                   mean=c.stats.mean, p=p, exact=exact, tested=tested, status=status, gain=gain,
                   threshold=threshold, steps=steps)


def _divergence(pairing, cells) -> list[DivergenceRow]:
    variants = [pairing.parent, *([pairing.treatment] if pairing.treatment else []), *pairing.controls,
                *pairing.references]
    out = []
    for size, budget in cells:
        sub = pairing.usable.filter((pl.col("size") == size) & (pl.col("budget_tokens") == budget))
        for v in variants:
            done = sub.filter(pl.col("variant") == v).height
            lo = [x for x in pairing.left_out
                  if (x.variant, x.size, x.budget_tokens) == (v, size, budget) and x.status != "pair"]
            div = tuple(sorted(x.seed for x in lo if x.status == "diverged"))
            fail = tuple(sorted(x.seed for x in lo if x.status == "failed"))
            other = len(lo) - len(div) - len(fail)
            if done or lo:
                out.append(DivergenceRow(size=size, budget_tokens=budget, variant=v, done=done, diverged=len(div),
                                         failed=len(fail), unfinished=other, diverged_seeds=div, failed_seeds=fail))
    return out


def analyze(final: pl.DataFrame, runs: pl.DataFrame, *, grid: str | None = None, allow_partial: bool = False,
            plan: AnalysisPlan | None = None, degenerate: Mapping[tuple[str, int, str], str] | None = None,
            aa_variants: tuple[str, ...] = AA_VARIANTS, progress: GridProgress | None = None) -> ReportStats:
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
            differences with the parent are exactly zero at every seed is added here.
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
    plan = plan if plan is not None else plan_from_configs(runs["config"].to_list() if "config" in runs.columns else [])
    aa_set = tuple(v for v in pairing.controls if v in aa_variants)
    controls = tuple(v for v in pairing.controls if v not in aa_variants)
    sets = {(s.comparison, s.size, s.budget_tokens): s for s in pairing.sets}
    comparisons = _comparisons(pairing, aa_set)
    warn = list(pairing.warnings)
    degen = _degeneracy(comparisons, degenerate or {}, aa_set, warn)
    cells = sorted({(s.size, s.budget_tokens) for s in pairing.sets}, key=cell_order)
    t = pairing.treatment
    headlines = _headlines(cells, sets, t, pairing.parent, degen, plan)
    assessments = [a for size, budget in cells for a in
                   _assess(size, budget, controls, sets, t, pairing.parent, degen, plan, headlines.get((size, budget)))]
    aa = _aa_checks(comparisons, sets, headlines, steps_by_run(runs), plan.alpha)
    mixed = _mixed_models(pairing, warn)
    if progress is None:
        progress = grid_progress(runs_all, None, grid=grid, queue_note="the queue was not read")
    robust, robust_left = tuned_rows(tuned_final, tuned_runs, pairing.parent, t,
                                     {k: h.mean for k, h in headlines.items()})
    budget = gain_vs_budget(comparisons, pairing.pairs)
    comparisons += [r.comparison for r in robust]
    return ReportStats(
        grid=grid or "", plan=plan, parent=pairing.parent, treatment=t, controls=controls, aa_variants=aa_set,
        references=pairing.references, comparisons=tuple(comparisons), headlines=tuple(headlines.values()),
        assessments=tuple(assessments), aa_checks=tuple(aa), divergence=tuple(_divergence(pairing, cells)),
        pairs=pairing.pairs + tuple(p for r in robust for p in r.pairs),
        left_out=pairing.left_out + tuple(robust_left), mixed=tuple(mixed), warnings=tuple(warn),
        progress=progress, budget=budget, robustness=tuple(robust))


def _mixed_models(pairing, warn: list[str]) -> list:
    """The mixed-model cross-check of every cell (:func:`reports.stats.mixed.fit_mixed_model`); its warnings
    go to ``warn``."""
    mixed = [fit_mixed_model(pairing.usable, size, budget, pairing.parent) for size, budget in pairing.cells]
    warn += [f"mixed model size={m.size} budget_tokens={m.budget_tokens}: {w}" for m in mixed for w in m.warnings]
    return mixed


def _comparisons(pairing, aa_set: tuple[str, ...]) -> list[Comparison]:
    """One :class:`Comparison` per paired set; a control that is an A/A check is of kind ``aa_check``."""
    out = []
    for s in pairing.sets:
        kind = "aa_check" if s.kind == "control_vs_parent" and s.first in aa_set else s.kind
        out.append(Comparison(comparison=s.comparison, first=s.first, second=s.second, kind=kind, size=s.size,
                              budget_tokens=s.budget_tokens, seeds=s.seeds, stats=describe([p.diff for p in s.pairs]),
                              missing=s.missing, code_versions=s.code_versions))
    return out


def _degeneracy(comparisons: list[Comparison], given: Mapping[tuple[str, int, str], str], aa_set: tuple[str, ...],
                warn: list[str]) -> dict[tuple[str, int, str], str]:
    """``(size, budget, variant) -> reason``: the given mapping (A/A checks exempt, unknown cells warned
    about in ``warn``), plus every control whose paired differences with the parent are all zero."""
    degen = {}
    known = {(c.size, c.budget_tokens, c.first) for c in comparisons} | {
        (c.size, c.budget_tokens, c.second) for c in comparisons}
    for key, reason in given.items():
        _size, _budget, variant = key
        if variant in aa_set:
            continue
        if tuple(key) not in known:
            warn.append(f"degeneracy given for {key}, which is not a variant of a cell of this grid: ignored")
            continue
        degen[tuple(key)] = str(reason)
    for c in comparisons:
        if c.kind == "control_vs_parent" and c.stats.n and c.stats.ties == c.stats.n:
            key = (c.size, c.budget_tokens, c.first)
            degen[key] = "; ".join(x for x in (degen.get(key), ALL_ZERO_REASON) if x)
    return degen


def _aa_checks(comparisons: list[Comparison], sets: dict, headlines: dict[tuple[str, int], Headline],
               steps_of: dict[str, int], alpha: float) -> list[AACheck]:
    """The A/A check of every ``aa_check`` comparison, against its cell's treatment gain."""
    aa = []
    for c in comparisons:
        if c.kind != "aa_check":
            continue
        ps = sets[(c.comparison, c.size, c.budget_tokens)]
        h = headlines.get((c.size, c.budget_tokens))
        steps = tuple(sorted({steps_of[r] for p in ps.pairs for r in (p.run_first, p.run_second) if r in steps_of}))
        aa.append(_aa_check(c, np.array([p.diff for p in ps.pairs]), h.mean if h and h.n else NAN, alpha, steps))
    return aa


def _sd(d: np.ndarray) -> float:
    """Sample SD (ddof 1); 0 at zero spread (:func:`reports.stats.paired_tests.zero_spread`); NaN below 2 values."""
    return NAN if d.size < 2 else 0.0 if bool(paired.zero_spread(d)) else float(np.std(d, ddof=1))


def _diffs(ps: PairedSet | None) -> np.ndarray:
    return np.array([p.diff for p in ps.pairs]) if ps is not None else np.zeros(0)


@dataclass(frozen=True, slots=True)
class _SequentialTest:
    """One comparison's test under the plan's looks (see :func:`_sequential`)."""

    look: Look
    p: float  # nominal p of the pairs the current look tests
    exact: bool
    sequential_p: float  # what Holm sees
    deciding_mean: float  # mean d at the look attaining sequential_p
    decided_look: int  # 1-based look attaining sequential_p (0: no looks, or untested)


def _sequential(d: np.ndarray, plan: AnalysisPlan, test) -> _SequentialTest:
    """Test differences ``d`` (seed order) as the plan reads them (:mod:`reports.stats.looks`).

    Without looks: ``test`` on all pairs, the ordinary p. With looks: ``test`` on the first
    n_k pairs at every look reached; the sequential p over them. Untested (fewer than 3
    pairs, or before the first look): NaN.
    """
    look = look_at(d.size, plan.looks, plan.alpha)
    if look.n < paired.MIN_PAIRS:
        return _SequentialTest(look=look, p=NAN, exact=False, sequential_p=NAN,
                               deciding_mean=float(d.mean()) if d.size else NAN, decided_look=0)
    p, exact = test(d[:look.n])
    if not plan.looks:
        return _SequentialTest(look=look, p=float(p), exact=bool(exact), sequential_p=float(p),
                               deciding_mean=float(d.mean()), decided_look=0)
    p_looks, means = at_looks(d, plan.looks, test)
    seq, i = sequential_p(p_looks, plan.looks)
    return _SequentialTest(look=look, p=float(p), exact=bool(exact), sequential_p=float(seq),
                           deciding_mean=float(means[int(i)]), decided_look=int(i) + 1)


class _HeadlineInput(NamedTuple):
    """One cell's treatment - parent differences and their test, before Holm over the cells."""

    size: str
    budget: int
    d: np.ndarray
    test: _SequentialTest
    degenerate: str


def _headlines(cells, sets, treatment, parent, degen, plan: AnalysisPlan) -> dict[tuple[str, int], Headline]:
    """Step 1 for every cell with a treatment - parent comparison; Holm over the cells."""
    if treatment is None:
        return {}
    label = f"{treatment} - {parent}"
    rows = []
    for size, budget in cells:
        ps = sets.get((label, size, budget))
        if ps is None:
            continue
        d = _diffs(ps)
        rows.append(_HeadlineInput(size=size, budget=budget, d=d, test=_sequential(d, plan, dec.headline_p),
                                   degenerate=degen.get((size, budget, treatment), "")))
    if not rows:
        return {}
    adj, est = dec.decide_headline(np.array([r.test.look.n for r in rows]),
                                   np.array([r.test.deciding_mean for r in rows]),
                                   np.array([r.test.sequential_p for r in rows]), plan.alpha,
                                   np.array([bool(r.degenerate) for r in rows]))
    n_cells = int(np.isfinite(adj).sum())
    return {(r.size, r.budget): _headline(r, label, float(hp), bool(established), n_cells, plan)
            for r, hp, established in zip(rows, adj, est)}


def _headline(r: _HeadlineInput, label: str, holm_p: float, established: bool, n_cells: int,
              plan: AnalysisPlan) -> Headline:
    """The :class:`Headline` of one cell, given its Holm p and whether the gain is established."""
    d, q, degenerate = r.d, r.test, r.degenerate
    n, mean = int(d.size), float(d.mean()) if d.size else NAN
    reason = (R_DEGENERATE if degenerate else R_ESTABLISHED if established else R_NO_LOOK
              if q.look.before_first else R_FEW if n < paired.MIN_PAIRS else R_NOT_BETTER
              if not d[:q.look.n].mean() < 0 else R_HOLM)
    verdict = dec.DEGENERATE if degenerate else dec.GAIN_ESTABLISHED if established else dec.GAIN_NOT_ESTABLISHED
    sd = _sd(d)
    return Headline(
        size=r.size, budget_tokens=r.budget, comparison=label, n=n, mean=mean, sd=sd,
        p_one_sided=NAN if degenerate else q.p,  # a degenerate treatment is not tested
        exact=q.exact, holm_p=holm_p, n_cells=n_cells, level=q.look.level, established=established,
        verdict=verdict, reason=reason, degenerate_reason=degenerate, mde_nats=look_mde(sd, n, plan, "one-sided"),
        seeds_needed=planned_seeds(plan.min_effect_nats, sd, plan, "one-sided"), look=q.look,
        sequential_p=NAN if degenerate else q.sequential_p, decided_look=q.decided_look)


class _ContrastInput(NamedTuple):
    """One control's reproduction contrast in one cell and its test, before Holm over the controls."""

    control: str
    seeds: tuple[int, ...]
    x: np.ndarray  # control - parent
    y: np.ndarray  # treatment - parent, same seeds
    e: np.ndarray  # the reproduction contrast
    test: _SequentialTest
    degenerate: str


def _assess(size, budget, controls, sets, treatment, parent, degen, plan: AnalysisPlan,
            head: Headline | None) -> list[ControlAssessment]:
    """Step 2 for the controls of one cell: contrasts, Holm over the assessed ones, verdicts."""
    established = head is not None and head.established
    tp = sets.get((f"{treatment} - {parent}", size, budget)) if treatment else None
    d_tp = {p.seed: p.diff for p in tp.pairs} if tp is not None else {}
    rows = []
    for c in controls:
        cp = sets.get((f"{c} - {parent}", size, budget))
        if cp is None:
            continue
        seeds = tuple(p.seed for p in cp.pairs if p.seed in d_tp)
        x = np.array([p.diff for p in cp.pairs if p.seed in d_tp])
        y = np.array([d_tp[s] for s in seeds])
        e = dec.reproduction_contrast(x, y, plan.reproduce_fraction)
        rows.append(_ContrastInput(control=c, seeds=seeds, x=x, y=y, e=e, test=_sequential(e, plan, dec.two_sided_p),
                                   degenerate=degen.get((size, budget, c), "")))
    if not rows:
        return []
    adj, codes = dec.decide_controls(established, np.array([bool(r.degenerate) for r in rows]),
                                     np.array([r.test.look.n for r in rows]),
                                     np.array([r.test.deciding_mean for r in rows]),
                                     np.array([r.test.sequential_p for r in rows]), plan.alpha)
    fam = int(np.isfinite(adj).sum())
    return [_assessment(r, size, budget, float(hp), int(code), fam, head, plan)
            for r, hp, code in zip(rows, adj, codes)]


def _assessment(r: _ContrastInput, size: str, budget: int, hp: float, code: int, fam: int, head: Headline | None,
                plan: AnalysisPlan) -> ControlAssessment:
    """The :class:`ControlAssessment` of one control, given its Holm p, verdict code and family size."""
    established = head is not None and head.established
    q, n = r.test, int(r.e.size)
    mean_e = float(r.e.mean()) if n else NAN
    p, exact, seq = (q.p, q.exact, q.sequential_p) if math.isfinite(hp) else (NAN, False, NAN)  # untested
    reason = (R_DEGENERATE if r.degenerate else (R_NO_TREATMENT if head is None else R_NO_GAIN)
              if not established else R_NO_LOOK if q.look.before_first else R_FEW if n < paired.MIN_PAIRS
              else R_SIGNIFICANT if code in (dec.V_DOES_NOT, dec.V_REPRODUCES) else R_HOLM)
    sd_e = _sd(r.e)
    planned = contrast_effect(plan.min_effect_nats, plan.reproduce_fraction)
    # Step 2 quantities only where step 2 runs (assessed, in the family).
    f = dec.fieller(r.x, r.y) if math.isfinite(hp) else dict(f=NAN, low=NAN, high=NAN, bounded=False)
    return ControlAssessment(
        control=r.control, size=size, budget_tokens=budget, n=n, seeds=r.seeds, contrast_mean=mean_e,
        contrast_sd=sd_e, contrast_p=p, exact=exact, holm_p=hp, family_size=fam if math.isfinite(hp) else 0,
        fraction=float(f["f"]), fraction_low=float(f["low"]), fraction_high=float(f["high"]),
        bounded=bool(f["bounded"]), verdict=dec.VERDICTS[code], reason=reason, degenerate_reason=r.degenerate,
        mde_nats=look_mde(sd_e, n, plan, "two-sided"), planned_effect=planned,
        seeds_needed=planned_seeds(planned, sd_e, plan, "two-sided"), look=q.look, sequential_p=seq)
