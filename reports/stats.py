"""The statistics plan of DESIGN section 6, computed for one grid.

Per cell (one size and budget), from final validation NLLs (nats/token) paired by seed
and protocol hash (:mod:`reports.pairing`):

* **Descriptives**, every comparison (treatment - parent, control - parent, treatment -
  control, parent - reference, the A/A check): n, seeds, mean d with its 95 % t interval,
  sd, d_z, wins, perplexity change, two-sided t p, exact sign-flip p, exact Wilcoxon and
  sign test with the smallest p each can reach (:mod:`reports.paired`). Reported, never
  used for a verdict.
* **Headline** (gatekeeper): one-sided t-test of treatment - parent, Holm over the cells;
  *established* where n >= 3, mean d below minus the numerical floor and Holm p < alpha,
  *absent* where the one-sided test of H0 "gain >= min_effect_nats" rejects (Holm over the
  cells), else *undecided* (:mod:`reports.decisions`, :mod:`reports.floors`). A seed where one
  side diverged counts as a loss for it (:mod:`reports.divergence`).
* **Controls**, only where the gain is established: the reproduction contrast
  ``e = c - (1 - rho) p - rho t``, two-sided, Holm over the grid's assessed (cell, control) contrasts; the fraction
  of the gain reproduced with its Fieller interval. ``invalid: degenerate`` takes
  precedence over every verdict.
* **A/A check** (in no control family; its offset tests Holm over the cells), **divergence table**, **MDE / seeds needed** from
  the plan's effect (:mod:`reports.power`), the **mixed model** (:mod:`reports.mixed`), and
  **gain vs budget** where a size has several budgets (:mod:`reports.budget`).
* With **looks** in the plan (DESIGN section 8, :mod:`reports.looks`), the headline and the
  control contrasts are tested at the look each cell has reached, at that look's share of
  alpha; Holm is applied to their sequential p.

Results are the frozen dataclasses of :mod:`reports.results` (re-exported here);
:meth:`ReportStats.to_frame` is ``stats.csv``. Notes are short fixed tags (``NOTE_*``);
:mod:`reports.render` words everything for people.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import polars as pl

from reports import decisions as dec
from reports import paired
from reports.budget import gain_vs_budget
from reports.divergence import TestedDiffs, contrast_losses, lost_by_variant, pair_losses, worst_case
from reports.floors import FLOOR_NATS, aa_floor, beyond_floor, within_floor_everywhere
from reports.mixed import fit_mixed_model
from reports.pairing import AA_VARIANTS, PairedSet, cell_order, pair_runs, steps_by_run
from reports.looks import Look, at_looks, look_at, sequential_p
from reports.plan import AnalysisPlan, plan_from_configs
from reports.power import contrast_effect, look_mde, planned_seeds
from reports.progress import GridProgress, grid_progress
from reports.results import (  # re-exported: the result objects are part of this module's API
    NAN, AA_NOISE_FRACTION, AA_NOISE_ABS, AA_STATUSES, CSV_COLUMNS, EXTRA_COLUMNS, KINDS, NOTE_FEW,
    NOTE_ZERO_SPREAD, NOTE_ZEROS, NOTE_LOST, NOTE_UNBOUNDED, NOTE_NO_EFFECT, NOTE_UNREACHABLE, NOTE_DEGENERATE,
    NOTE_NO_LOOK, NOTE_BETWEEN, NOTE_EARLIER, ALL_ZERO_REASON, R_ESTABLISHED, R_FEW, R_NOT_BETTER, R_HOLM,
    R_DEGENERATE, R_NO_GAIN, R_SIGNIFICANT, R_NO_TREATMENT, R_NO_LOOK, R_ABSENT, R_FLOOR, Descriptives, Comparison,
    Headline,
    ControlAssessment, AACheck, DivergenceRow, ReportStats,
)

def describe(d) -> Descriptives:
    """:class:`Descriptives` of a 1-D array of paired differences (nats/token).

    Raises:
        ValueError: non-finite values, or not one-dimensional.
    """
    d = paired.finite_array("d", d)
    if d.ndim != 1:
        raise ValueError(f"d must be one-dimensional, got shape {d.shape}")
    t = {k: float(v) for k, v in paired.t_test(d).items()}
    w_stat, w_p = paired.wilcoxon_p(d)
    wins, losses = int((d < 0).sum()), int((d > 0).sum())
    mean, sd = t["mean"], t["sd"]
    return Descriptives(
        int(d.size), mean, sd, t["ci_low"], t["ci_high"], t["t"], t["p"],
        mean / sd if sd > 0 else NAN, math.expm1(mean) if d.size else NAN,
        float(paired.sign_flip_p(d)), float(w_stat), float(w_p), float(paired.sign_test_p(d)),
        float(paired.min_attainable_p(wins + losses)), wins, losses, d.size - wins - losses,
        bool(t["zero_spread"]))


def _aa_check(c: Comparison, t: TestedDiffs, gain: float, alpha: float, steps: tuple[int, ...], holm_p: float,
              n_cells: int, floor: float) -> AACheck:
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
        status = "noise floor"
    return AACheck(c.first, c.size, c.budget_tokens, int(d.size), max_abs, mean, p, exact, tested,
                   status, gain, threshold, steps, holm_p, n_cells, floor, t.imputed)


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
                out.append(DivergenceRow(size, budget, v, done, len(div), len(fail), other, div, fail))
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
            (:func:`reports.plan.plan_from_configs`), else the defaults.
        degenerate: ``{(size, budget_tokens, variant): reason}`` of degenerate variants
            (reports/degeneracy.py, from routing records); a control whose paired
            differences with the parent are exactly zero at every seed is added here.
            A/A checks are exempt (they must be identical).
        aa_variants: variants that are A/A checks (never in a family, never a verdict).
        progress: how far the grid has got, the queue's view next to the store's
            (:func:`reports.progress.grid_progress`); default: the store's runs only,
            the queue marked as not read.

    Raises:
        ValueError, ProtocolMismatchError: see :func:`reports.pairing.pair_runs`; runs
            carrying different analysis plans.
    """
    from reports.robustness import split_tuned, tuned_rows

    if grid is not None:  # the [tuned] runs are split off first: they pair only in the robustness row
        final = final.filter(pl.col("grid") == grid) if "grid" in final.columns else final
        runs = runs.filter(pl.col("grid") == grid) if "grid" in runs.columns else runs
    runs_all = runs
    final, runs, tuned_final, tuned_runs = split_tuned(final, runs)
    pairing = pair_runs(final, runs, grid=grid, allow_partial=allow_partial, aa_variants=aa_variants)
    if plan is None:
        grid_runs = runs.filter(pl.col("grid") == grid) if grid is not None and "grid" in runs.columns else runs
        plan = plan_from_configs(grid_runs["config"].to_list() if "config" in grid_runs.columns else [])
    alpha = plan.alpha
    aa_set = tuple(v for v in pairing.controls if v in aa_variants)
    controls = tuple(v for v in pairing.controls if v not in aa_variants)
    sets = {(s.comparison, s.size, s.budget_tokens): s for s in pairing.sets}
    comparisons = []
    for s in pairing.sets:
        kind = "aa_check" if s.kind == "control_vs_parent" and s.first in aa_set else s.kind
        comparisons.append(Comparison(s.comparison, s.first, s.second, kind, s.size, s.budget_tokens, s.seeds,
                                      describe([p.diff for p in s.pairs]), s.missing, s.code_versions))
    warn = list(pairing.warnings)

    # Degeneracy: the given mapping (A/A exempt), plus all-zero paired differences of a control.
    degen = {}
    known = {(c.size, c.budget_tokens, c.first) for c in comparisons} | {
        (c.size, c.budget_tokens, c.second) for c in comparisons}
    for key, reason in (degenerate or {}).items():
        if key[2] in aa_set:
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

    cells = sorted({(s.size, s.budget_tokens) for s in pairing.sets}, key=cell_order)
    t = pairing.treatment
    usable = {(r["variant"], r["size"], r["budget_tokens"], r["seed"])
              for r in pairing.usable.select("variant", "size", "budget_tokens", "seed").iter_rows(named=True)}
    lost = _Lost(lost_by_variant(pairing.left_out, usable), usable)
    headlines = _headlines(cells, sets, t, pairing.parent, degen, plan, lost)
    assessments = _assess(cells, controls, sets, t, pairing.parent, degen, plan, headlines, lost)
    steps_of = steps_by_run(runs)
    aa_rows = []
    for c in comparisons:
        if c.kind != "aa_check":
            continue
        ps = sets[(c.comparison, c.size, c.budget_tokens)]
        tested = lost.tested(ps)
        aa_rows.append((c, ps, tested, dec.two_sided_p(tested.d)[0] if tested.d.size >= paired.MIN_PAIRS else NAN))
    aa_holm = dec.holm(np.array([float(r[3]) for r in aa_rows])) if aa_rows else np.zeros(0)
    n_aa = int(np.isfinite(aa_holm).sum())
    aa = []
    for (c, ps, tested, _), hp in zip(aa_rows, aa_holm):
        h = headlines.get((c.size, c.budget_tokens))
        steps = tuple(sorted({steps_of[r] for p in ps.pairs for r in (p.run_first, p.run_second) if r in steps_of}))
        floor = aa_floor([v for p in ps.pairs for v in (p.nll_first, p.nll_second)])
        aa.append(_aa_check(c, tested, h.mean if h and h.n else NAN, alpha, steps, float(hp), n_aa, floor))
    mixed = [fit_mixed_model(pairing.usable, size, budget, pairing.parent) for size, budget in pairing.cells]
    warn += [f"mixed model size={m.size} budget_tokens={m.budget_tokens}: {w}" for m in mixed for w in m.warnings]
    if progress is None:
        progress = grid_progress(runs_all, None, grid=grid, queue_note="the queue was not read")
    robust, robust_left = tuned_rows(tuned_final, tuned_runs, pairing.parent, t,
                                     {k: h.mean for k, h in headlines.items()}, describe)
    budget = gain_vs_budget(comparisons, pairing.pairs)
    comparisons += [r.comparison for r in robust]
    return ReportStats(grid or "", plan, pairing.parent, t, controls, aa_set, pairing.references, tuple(comparisons),
                       tuple(headlines.values()), tuple(assessments), tuple(aa), tuple(_divergence(pairing, cells)),
                       pairing.pairs + tuple(p for r in robust for p in r.pairs), pairing.left_out + tuple(robust_left),
                       tuple(mixed), tuple(warn), progress, budget, tuple(robust))


def _sd(d: np.ndarray) -> float:
    """Sample SD (ddof 1); 0 at zero spread (:func:`reports.paired.zero_spread`); NaN below 2 values."""
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
    """Test differences ``d`` (seed order) as the plan reads them (:mod:`reports.looks`).

    Without looks: ``test`` on all pairs, the ordinary p. With looks: ``test`` on the first
    n_k pairs at every look reached; the sequential p over them. Untested (fewer than 3
    pairs, or before the first look): NaN.
    """
    look = look_at(d.size, plan.looks, plan.alpha)
    if look.n < paired.MIN_PAIRS:
        return _SequentialTest(look, NAN, False, NAN, float(d.mean()) if d.size else NAN, 0)
    p, exact = test(d[:look.n])
    if not plan.looks:
        return _SequentialTest(look, float(p), bool(exact), float(p), float(d.mean()), 0)
    p_looks, means = at_looks(d, plan.looks, test)
    seq, i = sequential_p(p_looks, plan.looks)
    return _SequentialTest(look, float(p), bool(exact), float(seq), float(means[int(i)]), int(i) + 1)


class _Lost:
    """Diverged runs of the grid and the seeds each variant finished (reports.divergence)."""

    def __init__(self, lost: dict[tuple[str, str, int], dict[int, str]], usable: set[tuple]):
        self.lost, self.usable = lost, usable

    def of(self, variant: str, size: str, budget: int) -> dict[int, str]:
        return self.lost.get((variant, size, budget), {})

    def done(self, variant: str, size: str, budget: int) -> set[int]:
        return {k[3] for k in self.usable if k[:3] == (variant, size, budget)}

    def tested(self, ps: PairedSet) -> TestedDiffs:
        """The differences of ``ps`` a test uses: its pairs plus the lost seeds counted as losses."""
        key = (ps.size, ps.budget_tokens)
        losses, dropped = pair_losses(ps.first, ps.second, self.of(ps.first, *key), self.of(ps.second, *key),
                                      self.done(ps.first, *key), self.done(ps.second, *key))
        return worst_case(ps.seeds, _diffs(ps), losses, dropped)


def _headlines(cells, sets, treatment, parent, degen, plan: AnalysisPlan,
               lost: _Lost) -> dict[tuple[str, int], Headline]:
    """Step 1 for every cell with a treatment - parent comparison: established (Holm over the cells),
    absent (the absence test, Holm over the cells) or undecided."""
    if treatment is None:
        return {}
    label = f"{treatment} - {parent}"
    delta = plan.min_effect_nats
    rows = []
    for size, budget in cells:
        ps = sets.get((label, size, budget))
        if ps is None:
            continue
        tested = lost.tested(ps)
        d = tested.d
        degenerate = degen.get((size, budget, treatment), "")
        absence = _sequential(d, plan, dec.absence_test(delta)) if delta is not None else None
        rows.append((size, budget, tested, _sequential(d, plan, dec.headline_p), absence, degenerate))
    if not rows:
        return {}
    seq = [r[3] for r in rows]
    degenerate_cells = np.array([bool(r[5]) for r in rows])
    adj, est = dec.decide_headline(np.array([q.look.n for q in seq]), np.array([q.deciding_mean for q in seq]),
                                   np.array([q.sequential_p for q in seq]), plan.alpha, degenerate_cells)
    p_abs = np.array([r[4].sequential_p if r[4] is not None else NAN for r in rows])
    adj_abs, absent = dec.decide_absence(np.array([q.look.n for q in seq]), p_abs, plan.alpha, degenerate_cells)
    levels = dec.holm_levels(np.where(degenerate_cells, NAN, p_abs), plan.alpha)
    n_cells = int(np.isfinite(adj).sum())
    out = {}
    for (size, budget, tested, q, qa, degenerate), hp, established, ha, is_absent, level in zip(
            rows, adj, est, adj_abs, absent, levels):
        d = tested.d
        n, mean, established = int(d.size), float(d.mean()) if d.size else NAN, bool(established)
        is_absent = bool(is_absent) and not established
        look_mean = float(d[:q.look.n].mean()) if q.look.n else NAN
        reason = (R_DEGENERATE if degenerate else R_ESTABLISHED if established else R_ABSENT if is_absent
                  else R_NO_LOOK if q.look.before_first else R_FEW if n < paired.MIN_PAIRS else R_NOT_BETTER
                  if not look_mean < 0 else R_FLOOR if not bool(beyond_floor(look_mean)) else R_HOLM)
        verdict = dec.DEGENERATE if degenerate else dec.headline_verdict(established, is_absent, delta)
        sd = _sd(d)
        p = NAN if degenerate else q.p  # a degenerate treatment is not tested
        # The bound on the pairs the current look tests, at Holm's level for this cell (scaled to the look's share).
        bound_level = float(level) * (q.look.level / plan.alpha) if qa is not None and math.isfinite(level) else NAN
        upper = (float(dec.gain_upper_bound(d[:q.look.n], bound_level)) if math.isfinite(bound_level)
                 and q.look.n >= paired.MIN_PAIRS else NAN)
        gain = -mean if n else NAN
        undecided = verdict == dec.UNDECIDED
        out[(size, budget)] = Headline(
            size, budget, label, n, mean, sd, p, q.exact, float(hp), n_cells, q.look.level, established, verdict,
            reason, degenerate, look_mde(sd, n, plan, "one-sided"),
            planned_seeds(plan.min_effect_nats, sd, plan, "one-sided"), q.look,
            NAN if degenerate else q.sequential_p, q.decided_look,
            absent=is_absent, absence_p=NAN if degenerate or qa is None else qa.p,
            absence_holm_p=float(ha), gain_upper=upper, gain_upper_level=bound_level, seeds=tested.seeds,
            imputed=tested.imputed, dropped=tested.dropped,
            seeds_establish=planned_seeds(gain, sd, plan, "one-sided") if undecided and gain > FLOOR_NATS else None,
            seeds_absent=(planned_seeds(delta - gain, sd, plan, "one-sided")
                          if undecided and delta is not None and gain < delta else None))
    return out


def _assess(cells, controls, sets, treatment, parent, degen, plan: AnalysisPlan, headlines,
            lost: _Lost) -> list[ControlAssessment]:
    """Step 2 for the controls of every cell: contrasts, Holm over every assessed (cell, control)
    contrast of the grid (DESIGN 6 "families across the grid"), verdicts."""
    rows = []
    for size, budget in cells:
        head = headlines.get((size, budget))
        tp = sets.get((f"{treatment} - {parent}", size, budget)) if treatment else None
        d_tp = {p.seed: p.diff for p in tp.pairs} if tp is not None else {}
        key = (size, budget)
        for c in controls:
            cp = sets.get((f"{c} - {parent}", size, budget))
            if cp is None:
                continue
            seeds = tuple(p.seed for p in cp.pairs if p.seed in d_tp)
            x = np.array([p.diff for p in cp.pairs if p.seed in d_tp])  # control - parent
            y = np.array([d_tp[s] for s in seeds])  # treatment - parent, same seeds
            e = dec.reproduction_contrast(x, y, plan.reproduce_fraction)
            names = (c, parent) + ((treatment,) if treatment else ())
            losses, dropped = (contrast_losses(c, treatment, {v: lost.of(v, *key) for v in names},
                                               {v: lost.done(v, *key) for v in names}, parent)
                               if treatment else ({}, []))
            tested = worst_case(seeds, e, losses, dropped)
            degenerate = degen.get((size, budget, c), "")
            rows.append((c, size, budget, head, x, y, tested, _sequential(tested.d, plan, dec.two_sided_p),
                         degenerate))
    if not rows:
        return []
    established = np.array([r[3] is not None and r[3].established for r in rows])
    adj, codes = dec.decide_controls(established, np.array([bool(r[8]) for r in rows]),
                                     np.array([r[7].look.n for r in rows]),
                                     np.array([r[7].deciding_mean for r in rows]),
                                     np.array([r[7].sequential_p for r in rows]), plan.alpha)
    fam = int(np.isfinite(adj).sum())
    planned = contrast_effect(plan.min_effect_nats, plan.reproduce_fraction)
    out = []
    for (c, size, budget, head, x, y, tested, q, degenerate), hp, code, est in zip(rows, adj, codes, established):
        e = tested.d
        n, code = int(e.size), int(code)
        mean_e = float(e.mean()) if n else NAN
        p, exact, seq = (q.p, q.exact, q.sequential_p) if math.isfinite(hp) else (NAN, False, NAN)  # untested
        reason = (R_DEGENERATE if degenerate else (R_NO_TREATMENT if head is None else R_NO_GAIN)
                  if not est else R_NO_LOOK if q.look.before_first else R_FEW if n < paired.MIN_PAIRS
                  else R_SIGNIFICANT if code in (dec.V_DOES_NOT, dec.V_REPRODUCES)
                  else R_FLOOR if hp < plan.alpha else R_HOLM)
        sd_e = _sd(e)
        # Step 2 quantities only where step 2 runs (assessed, in the family); Fieller on the observed seeds.
        f = (dec.fieller(x, y) if math.isfinite(hp) and x.size
             else dict(f=NAN, low=NAN, high=NAN, bounded=False))
        out.append(ControlAssessment(
            c, size, budget, n, tested.seeds, mean_e, sd_e, p, exact, float(hp), fam if math.isfinite(hp) else 0,
            float(f["f"]), float(f["low"]), float(f["high"]), bool(f["bounded"]), dec.VERDICTS[code], reason,
            degenerate, look_mde(sd_e, n, plan, "two-sided"), planned,
            planned_seeds(planned, sd_e, plan, "two-sided"), q.look, seq, tested.imputed, tested.dropped))
    return out
