"""The statistics plan of DESIGN section 6, computed for one grid.

Per cell (one size and budget), from final validation NLLs (nats/token) paired by seed
and protocol hash (:mod:`harness.report.stats.pairing`):

* **Descriptives**, every comparison (treatment - parent, control - parent, treatment -
  control, parent - reference, the A/A check): n, seeds, mean d with its 95 % t interval,
  sd, d_z, wins, perplexity change, two-sided t p, exact sign-flip p, exact Wilcoxon and
  sign test with the smallest p each can reach (:mod:`harness.report.stats.paired_tests`). Reported, never
  used for a verdict.
* **Headline** (gatekeeper): one-sided t-test of treatment - parent, Holm over the cells;
  *established* where n >= 3, mean d below minus the numerical floor and Holm p < alpha,
  *absent* where the one-sided test of H0 "gain >= min_effect_nats" rejects (Holm over the
  cells), else *undecided* (:mod:`harness.report.stats.decisions`, :mod:`harness.report.stats.floors`). A seed
  where one side diverged counts as a loss for it (:mod:`harness.report.stats.divergence`).
* **Controls**, only where the gain is established: the reproduction contrast
  ``e = c - (1 - rho) p - rho t``, two-sided, Holm over the grid's assessed (cell, control)
  contrasts; the fraction
  of the gain reproduced with its Fieller interval. ``invalid: degenerate`` takes
  precedence over every verdict.
* **A/A check** (in no control family; its offset tests Holm over the cells), **divergence table**, **MDE / seeds needed** from
  the plan's effect (:mod:`harness.report.stats.power`), the **mixed model** (:mod:`harness.report.stats.mixed`), and
  **gain vs budget** where a size has several budgets (:mod:`harness.report.stats.budget`).
* **Factorial attribution** where the plan has a ``[factorial]`` design (DESIGN section 12,
  :mod:`harness.report.stats.factorial`): simple and main effects and the interaction per cell, Holm over the
  grid's factorial family.
* With **looks** in the plan (DESIGN section 8, :mod:`harness.report.stats.looks`), the headline and the
  control contrasts are tested at the look each cell has reached, at that look's share of
  alpha; Holm is applied to their sequential p.

:func:`analyze` reads as its steps: keep the grid's rows (:func:`~harness.report.stats.pairing.of_grid`), split off
the ``[tuned]`` runs, pair, describe each comparison (:func:`_comparisons`), collect degenerate
variants (:func:`_degeneracy`), decide the headlines (:mod:`harness.report.stats.headline_tests`) and the
controls (:mod:`harness.report.stats.control_assessment`), the A/A checks (:mod:`harness.report.stats.aa_checks`),
the mixed models, the robustness rows and gain vs budget. Results are the frozen dataclasses of :mod:`harness.report.stats.results`;
:meth:`ReportStats.to_frame` is ``stats.csv``. Notes are short fixed tags (``NOTE_*``);
:mod:`harness.report.render.sections` words everything for people.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import polars as pl

from harness.design.analysis_plan import AnalysisPlan, plan_from_configs
from harness.report.stats.aa_checks import aa_checks
from harness.report.stats.budget import gain_vs_budget
from harness.report.stats.control_assessment import assess_controls
from harness.report.stats.descriptives import describe
from harness.report.stats.divergence import LostSeeds
from harness.report.stats.factorial import factorial_cells
from harness.report.stats.floors import FLOOR_NATS, within_floor_everywhere
from harness.report.stats.headline_tests import headline_rows
from harness.report.stats.mixed import fit_mixed_model
from harness.report.stats.pairing import AA_VARIANTS, PairedSet, cell_order, of_grid, pair_runs, steps_by_run
from harness.report.stats.plateau import plateau_rows
from harness.report.stats.progress import GridProgress, grid_progress
from harness.report.stats.results import (
    ALL_ZERO_REASON,
    Comparison,
    DivergenceRow,
    ReportStats,
)
from harness.report.stats.robustness import split_tuned, tuned_rows


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
    cross_checks: bool = True,
) -> ReportStats:
    """Pair runs by seed and compute DESIGN section 6 for one grid.

    Args:
        final: one row per finished run: run_id, variant, role, seed, size, budget_tokens, protocol_hash, val_nll
            (nats/token) [, grid]; runs: one row per run (any status), the same and status [, error,
            code_version, config, grid].
        grid: keep only rows of this grid (where the frame has a ``grid`` column).
        allow_partial: protocol mismatches and duplicated runs become warnings.
        plan: the analysis plan; default: the one stored in the runs' configs
            (:func:`harness.design.analysis_plan.plan_from_configs`), else the defaults.
        degenerate: ``{(size, budget_tokens, variant): reason}`` of degenerate variants
            (harness/report/stats/degeneracy.py, from routing records); a control whose paired
            differences with the parent are within the numerical floor at every seed is added here.
            A/A checks are exempt (they must be identical).
        aa_variants: variants that are A/A checks (never in a family, never a verdict).
        progress: how far the grid has got, the queue's view next to the store's
            (:func:`harness.report.stats.progress.grid_progress`); default: the store's runs only.
        cross_checks: fit the mixed model per cell (off: verdicts alone, :mod:`harness.report.stats.leave_one_out`).

    Raises:
        ValueError, ProtocolMismatchError: see :func:`harness.report.stats.pairing.pair_runs`; runs
            carrying different analysis plans.
    """
    final, runs_all = of_grid(final, grid), of_grid(runs, grid)
    # The [tuned] runs are split off first: they pair only in the robustness row.
    final, runs, tuned_final, tuned_runs = split_tuned(final, runs_all)
    pairing = pair_runs(final, runs, grid=grid, allow_partial=allow_partial, aa_variants=aa_variants)
    plan = plan if plan is not None else _stored_plan(runs)
    aa_set = tuple(v for v in pairing.controls if v in aa_variants)
    controls = tuple(v for v in pairing.controls if v not in aa_variants)
    sets = {(s.comparison, s.size, s.budget_tokens): s for s in pairing.sets}
    comparisons = _comparisons(pairing, aa_set)
    warn = list(pairing.warnings)
    degen = _degeneracy(comparisons, sets, degenerate or {}, aa_set, warn)
    cells = sorted({(s.size, s.budget_tokens) for s in pairing.sets}, key=cell_order)
    t, lost = pairing.treatment, LostSeeds.of_pairing(pairing)
    headlines = headline_rows(cells, sets, t, pairing.parent, degen, plan, lost)
    factorial = factorial_cells(pairing.usable, cells, plan, lost, allow_partial=allow_partial, warn=warn)
    mixed = _mixed_models(pairing, warn) if cross_checks else []
    if progress is None:
        progress = grid_progress(runs_all, None, grid=grid, queue_note="the queue was not read")
    gains = {k: h.mean for k, h in headlines.items()}  # the robustness rows' reference: each cell's gain
    robust, robust_left = tuned_rows(tuned_final, tuned_runs, pairing.parent, t, gains)
    return ReportStats(
        grid=grid or "",
        plan=plan,
        parent=pairing.parent,
        treatment=t,
        controls=controls,
        aa_variants=aa_set,
        references=pairing.references,
        comparisons=(*comparisons, *(r.comparison for r in robust)),
        headlines=tuple(headlines.values()),
        assessments=tuple(
            assess_controls(cells, controls, sets, t, pairing.parent, degen, plan, headlines, lost)
        ),
        aa_checks=tuple(aa_checks(comparisons, sets, headlines, steps_by_run(runs), plan.alpha, lost)),
        divergence=tuple(_divergence(pairing, cells)),
        pairs=pairing.pairs + tuple(p for r in robust for p in r.pairs),
        left_out=pairing.left_out + tuple(robust_left),
        mixed=tuple(mixed),
        warnings=tuple(warn),
        progress=progress,
        budget=gain_vs_budget(comparisons, pairing.pairs),
        robustness=tuple(robust),
        plateau=plateau_rows(final, runs),
        factorial=factorial,
    )


def _stored_plan(runs: pl.DataFrame) -> AnalysisPlan:
    """The analysis plan stored with the runs' configs (:func:`harness.design.analysis_plan.plan_from_configs`),
    else the defaults."""
    return plan_from_configs(runs["config"].to_list() if "config" in runs.columns else [])


def _mixed_models(pairing, warn: list[str]) -> list:
    """The mixed-model cross-check of every cell (:func:`harness.report.stats.mixed.fit_mixed_model`); its warnings
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
    numerical floor at every seed (:func:`harness.report.stats.floors.within_floor_everywhere`)."""
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


def _diffs(ps: PairedSet | None) -> np.ndarray:
    return np.array([p.diff for p in ps.pairs]) if ps is not None else np.zeros(0)
