"""The statistics plan of DESIGN section 6, computed for one grid.

Per cell (one size and budget), from final validation NLLs (nats/token) paired by seed
and protocol hash (:mod:`reports.pairing`):

* **Descriptives**, every comparison (treatment - parent, control - parent, treatment -
  control, parent - reference, the A/A check): n, seeds, mean d with its 95 % t interval,
  sd, d_z, wins, perplexity change, two-sided t p, exact sign-flip p, exact Wilcoxon and
  sign test with the smallest p each can reach (:mod:`reports.paired`). Reported, never
  used for a verdict.
* **Headline** (gatekeeper): one-sided t-test of treatment - parent, Holm over the cells;
  *established* where n >= 3, mean d < 0 and Holm p < alpha (:mod:`reports.decisions`).
* **Controls**, only where the gain is established: the reproduction contrast
  ``e = c - (1 - rho) p - rho t``, two-sided, Holm over the cell's controls; the fraction
  of the gain reproduced with its Fieller interval. ``invalid: degenerate`` takes
  precedence over every verdict.
* **A/A check** (outside every family), **divergence table**, **MDE / seeds needed** from
  the plan's effect (:mod:`reports.power`), the **mixed model** (:mod:`reports.mixed`), and
  **gain vs budget** where a size has several budgets (:mod:`reports.budget`).
* With **looks** in the plan (DESIGN section 8, :mod:`reports.looks`), the headline and the
  control contrasts are tested at the look each cell has reached, at that look's share of
  alpha; Holm is applied to their sequential p.

Results are frozen dataclasses; :meth:`ReportStats.to_frame` is ``stats.csv``. Notes are
short fixed tags (``NOTE_*``); :mod:`reports.render` words everything for people.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import polars as pl

from reports import decisions as dec
from reports import paired
from reports.budget import GainVsBudget, gain_vs_budget
from reports.mixed import MixedModelCheck, fit_mixed_model
from reports.pairing import AA_VARIANTS, LeftOut, Pair, PairedSet, cell_order, pair_runs, steps_by_run
from reports.looks import Look, at_looks, look_at, sequential_p
from reports.plan import AnalysisPlan, plan_from_configs
from reports.power import SeedsNeeded, contrast_effect, look_mde, planned_seeds
from reports.progress import GridProgress, grid_progress

NAN = float("nan")
AA_NOISE_FRACTION = 0.5  # A/A warns when max |d| >= this x |treatment's mean gain| (DESIGN 6)
AA_NOISE_ABS = 1e-3  # nats/token: the A/A warning threshold when there is no treatment gain
AA_STATUSES = ("bit-identical", "noise floor", "warn", "FAIL", "no pairs")  # AACheck.status values

# stats.csv column contract (DESIGN section 6), in order; extra columns follow.
CSV_COLUMNS = (
    "comparison", "kind", "size", "budget_tokens", "n_pairs", "seeds", "mean_diff", "ci_low", "ci_high",
    "sd", "d_z", "wins", "ppl_change", "t_p", "p_one_sided", "perm_p", "wilcoxon_p", "sign_p", "holm_p",
    "contrast_mean", "contrast_p", "gain_fraction", "gain_fraction_low", "gain_fraction_high", "verdict",
    "note", "mde_nats", "seeds_needed",
)
EXTRA_COLUMNS = (
    "first", "second", "reason", "t_stat", "df", "n_nonzero", "perm_min_p", "wilcoxon_stat",
    "wilcoxon_min_p", "sign_min_p", "p_one_sided_test", "family_size", "contrast_n", "contrast_sd",
    "contrast_test", "gain_fraction_bounded", "planned_effect_nats", "power_at_max_seeds",
    "missing_seeds", "code_versions", "level", "look", "n_looks", "look_pairs", "sequential_p",
)
KINDS = ("treatment_vs_parent", "control_vs_parent", "aa_check", "treatment_vs_control", "parent_vs_reference")

# Short fixed note tags (stats.csv `note`; reports.render words them).
NOTE_FEW = "fewer than 3 pairs: no test"
NOTE_ZERO_SPREAD = "zero spread: t undefined, the exact sign-flip p is the only p"
NOTE_ZEROS = "{k} zero difference(s) dropped by the Wilcoxon and sign tests"
NOTE_LOST = "lost seeds {seeds}"
NOTE_UNBOUNDED = "gain fraction unbounded: the gain's 95 % interval covers 0"
NOTE_NO_EFFECT = "seeds_needed: no min_effect_nats in the plan"
NOTE_UNREACHABLE = "seeds_needed: not reachable at this budget (> max_seeds {max_seeds})"
NOTE_DEGENERATE = "degenerate: {reason}"
NOTE_NO_LOOK = "before the first look ({first} pairs): not tested yet"
NOTE_BETWEEN = "look {k} of {K} tests the first {n} of {pairs} pairs"
NOTE_EARLIER = "established at look {k} of {K}"
ALL_ZERO_REASON = "paired differences with the parent exactly zero at every seed"

# Reason tags of a headline or control verdict.
R_ESTABLISHED, R_FEW, R_NOT_BETTER, R_HOLM = "established", "fewer than 3 pairs", "mean d >= 0", "Holm p >= alpha"
R_DEGENERATE, R_NO_GAIN, R_SIGNIFICANT = "degenerate", "gain not established", "Holm p < alpha"
R_NO_TREATMENT = "no treatment in this cell"
R_NO_LOOK = "before the first look"


@dataclass(frozen=True, slots=True)
class Descriptives:
    """Descriptive statistics of paired differences ``d = first - second`` (nats/token).

    ``ci_low/ci_high`` is the 95 % two-sided t interval; ``t_p`` two-sided; ``perm_p`` the
    exact sign-flip p; ``min_p`` the smallest two-sided p the sign-flip, Wilcoxon and sign
    tests can reach with ``n_nonzero`` differences. Tests are NaN with n < 3; the t values
    are NaN with zero spread (``zero_spread``).
    """

    n: int
    mean: float
    sd: float
    ci_low: float
    ci_high: float
    t_stat: float
    t_p: float
    d_z: float
    ppl_change: float
    perm_p: float
    wilcoxon_stat: float
    wilcoxon_p: float
    sign_p: float
    min_p: float
    wins: int
    losses: int
    ties: int
    zero_spread: bool

    @property
    def n_nonzero(self) -> int:
        return self.wins + self.losses


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


@dataclass(frozen=True, slots=True)
class Comparison:
    """One comparison ``first - second`` in one cell: its pairs and descriptives."""

    comparison: str
    first: str
    second: str
    kind: str  # one of KINDS
    size: str
    budget_tokens: int
    seeds: tuple[int, ...]
    stats: Descriptives
    missing: tuple[str, ...] = ()  # "seed 3 (rd_attnres: failed: ...)", one per lost seed
    code_versions: tuple[str, ...] = ()

    @property
    def lost_seeds(self) -> tuple[int, ...]:
        return tuple(int(m.split()[1]) for m in self.missing)


@dataclass(frozen=True, slots=True)
class Headline:
    """Step 1 in one cell: is the treatment's gain over the parent established?

    ``n``, ``mean`` and ``sd`` describe all pairs. ``p_one_sided`` is the one-sided t p (H1
    mean d < 0), or with zero spread the exact one-sided sign-flip p (``exact``), of the
    pairs the current look tests (``look``, :mod:`reports.looks`: all pairs without looks,
    the first n_k with looks, none before the first look); ``level`` is that look's level
    (the spent increment Delta_k with looks, the plan's alpha without). ``sequential_p`` is
    the p Holm sees: the ordinary p without looks, else the smallest alpha whose spending
    would have rejected at one of the looks so far (``decided_look``, 1-based, is the look
    attaining it). ``holm_p`` is Holm-adjusted over the ``n_cells`` cells with a p;
    established where ``holm_p < alpha``. ``mde_nats`` is the gain detectable with the
    plan's power at this look (one-sided, the observed sd); ``seeds_needed`` is for the
    plan's ``min_effect_nats`` (:func:`reports.power.planned_seeds`).
    """

    size: str
    budget_tokens: int
    comparison: str
    n: int
    mean: float
    sd: float
    p_one_sided: float
    exact: bool
    holm_p: float
    n_cells: int
    level: float
    established: bool
    verdict: str
    reason: str
    degenerate_reason: str
    mde_nats: float
    seeds_needed: SeedsNeeded
    look: Look
    sequential_p: float
    decided_look: int


@dataclass(frozen=True, slots=True)
class ControlAssessment:
    """Step 2 for one control in one cell: the reproduction contrast and the verdict.

    ``n``/``seeds``: seeds where control, parent and treatment all have a paired run.
    ``contrast_p`` (two-sided; exact sign-flip at zero spread, ``exact``) and ``holm_p``
    (over the cell's ``family_size`` assessed controls) are NaN where no test was run
    (gain not established, degenerate, n < 3). ``fraction``/``low``/``high``: f = mean(c -
    p) / mean(t - p) and its 95 % Fieller interval (``bounded`` False: unbounded), also
    only where the contrast was tested.
    ``mde_nats`` and ``seeds_needed`` are for the contrast (two-sided) at the planned
    contrast effect ``planned_effect`` = min(rho, 1 - rho) x min_effect_nats.
    With looks, the contrast is tested like the headline (:class:`Headline`): ``contrast_p``
    on the first n_k of its seeds at the look's level, Holm over the controls applied to
    ``sequential_p`` (reports/LOG.md: the controls spend their alpha too).
    """

    control: str
    size: str
    budget_tokens: int
    n: int
    seeds: tuple[int, ...]
    contrast_mean: float
    contrast_sd: float
    contrast_p: float
    exact: bool
    holm_p: float
    family_size: int
    fraction: float
    fraction_low: float
    fraction_high: float
    bounded: bool
    verdict: str
    reason: str
    degenerate_reason: str
    mde_nats: float
    planned_effect: float
    seeds_needed: SeedsNeeded
    look: Look
    sequential_p: float


@dataclass(frozen=True, slots=True)
class AACheck:
    """The A/A check: a variant equal to the parent in exact arithmetic vs the parent.

    ``status``: ``bit-identical`` (every d exactly 0), ``FAIL`` (systematic offset: two-sided
    p < alpha, exact sign-flip at zero spread), ``warn`` (max |d| >= ``threshold``: the
    numerical noise floor rivals the gain), ``noise floor`` (max |d| below it), ``no pairs``.
    ``tested`` is False with fewer than 3 pairs. ``threshold`` = 0.5 |gain| (gain = the
    treatment's mean d in the cell) or ``AA_NOISE_ABS`` without one. Outside every family.
    """

    variant: str
    size: str
    budget_tokens: int
    n: int
    max_abs: float
    mean: float
    p: float
    exact: bool
    tested: bool
    status: str
    gain: float
    threshold: float
    steps: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class DivergenceRow:
    """Run outcomes of one variant in one cell (divergence is an outcome, DESIGN 6)."""

    size: str
    budget_tokens: int
    variant: str
    done: int
    diverged: int
    failed: int
    unfinished: int
    diverged_seeds: tuple[int, ...]
    failed_seeds: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ReportStats:
    """Everything the report shows, computed once by :func:`analyze`."""

    grid: str
    plan: AnalysisPlan
    parent: str
    treatment: str | None
    controls: tuple[str, ...]  # real controls (A/A checks excluded)
    aa_variants: tuple[str, ...]
    references: tuple[str, ...]
    comparisons: tuple[Comparison, ...]
    headlines: tuple[Headline, ...]
    assessments: tuple[ControlAssessment, ...]
    aa_checks: tuple[AACheck, ...]
    divergence: tuple[DivergenceRow, ...]
    pairs: tuple[Pair, ...]
    left_out: tuple[LeftOut, ...]
    mixed: tuple[MixedModelCheck, ...]
    warnings: tuple[str, ...] = field(default=())
    progress: GridProgress | None = None  # the queue's view next to the store's (reports.progress)
    budget: GainVsBudget = field(default=GainVsBudget((), ()))  # gain vs budget (DESIGN 8): several budgets only

    @property
    def cells(self) -> list[tuple[str, int]]:
        return sorted({(c.size, c.budget_tokens) for c in self.comparisons}, key=cell_order)

    def headline(self, size: str, budget: int) -> Headline | None:
        return next((h for h in self.headlines if (h.size, h.budget_tokens) == (size, budget)), None)

    def assessment(self, control: str, size: str, budget: int) -> ControlAssessment | None:
        return next((a for a in self.assessments if (a.control, a.size, a.budget_tokens) == (control, size, budget)),
                    None)

    def aa_check(self, variant: str, size: str, budget: int) -> AACheck | None:
        return next((a for a in self.aa_checks if (a.variant, a.size, a.budget_tokens) == (variant, size, budget)),
                    None)

    def diverged(self) -> list[DivergenceRow]:
        """Divergence rows of variants that diverged at some seed (flagged at the top)."""
        return [r for r in self.divergence if r.diverged]

    def to_frame(self) -> pl.DataFrame:
        """``stats.csv``: one row per comparison, contract columns then extra columns."""
        rows = [_row(self, c) for c in self.comparisons]
        cols = CSV_COLUMNS + EXTRA_COLUMNS
        return pl.DataFrame(rows).select(cols) if rows else pl.DataFrame({c: [] for c in cols})

    def pairs_frame(self) -> pl.DataFrame:
        """All matched pairs: comparison, size, budget, seed, run ids, NLLs, diff."""
        cols = list(Pair.__slots__)
        return pl.DataFrame([{c: getattr(p, c) for c in cols} for p in self.pairs],
                            schema={c: None for c in cols} if not self.pairs else None)


def _needed_notes(s: SeedsNeeded, planned: float | None) -> list[str]:
    if planned is None:
        return [NOTE_NO_EFFECT]
    return [] if s.reachable or math.isnan(s.power_at_max) else [NOTE_UNREACHABLE.format(max_seeds=s.max_seeds)]


def _look_columns(look: Look, level: float, seq: float) -> dict:
    return dict(level=level, look=look.k if look.planned else None, n_looks=look.n_looks or None,
                look_pairs=look.n, sequential_p=seq)


def _look_notes(look: Look, decided: int) -> list[str]:
    if look.before_first:
        return [NOTE_NO_LOOK.format(first=look.next_n)]
    notes = [NOTE_BETWEEN.format(k=look.k, K=look.n_looks, n=look.n, pairs=look.pairs)] if (
        look.planned and look.n < look.pairs) else []
    return notes + ([NOTE_EARLIER.format(k=decided, K=look.n_looks)] if 0 < decided < look.k else [])


def _row(rs: ReportStats, c: Comparison) -> dict:
    s = c.stats
    notes = [NOTE_FEW] if s.n < paired.MIN_PAIRS else []
    if s.zero_spread and s.n >= paired.MIN_PAIRS:
        notes.append(NOTE_ZERO_SPREAD)
    if s.ties and s.n_nonzero:
        notes.append(NOTE_ZEROS.format(k=s.ties))
    if c.missing:
        notes.append(NOTE_LOST.format(seeds=", ".join(map(str, c.lost_seeds))))
    row = dict(
        comparison=c.comparison, kind=c.kind, size=c.size, budget_tokens=c.budget_tokens, n_pairs=s.n,
        seeds=" ".join(map(str, c.seeds)), mean_diff=s.mean, ci_low=s.ci_low, ci_high=s.ci_high, sd=s.sd,
        d_z=s.d_z, wins=f"{s.wins}/{s.n}", ppl_change=s.ppl_change, t_p=s.t_p, p_one_sided=NAN,
        perm_p=s.perm_p, wilcoxon_p=s.wilcoxon_p, sign_p=s.sign_p, holm_p=NAN, contrast_mean=NAN,
        contrast_p=NAN, gain_fraction=NAN, gain_fraction_low=NAN, gain_fraction_high=NAN, verdict="",
        mde_nats=NAN, seeds_needed=None, first=c.first, second=c.second, reason="", t_stat=s.t_stat,
        df=s.n - 1 if s.n >= paired.MIN_PAIRS else None, n_nonzero=s.n_nonzero, perm_min_p=s.min_p,
        wilcoxon_stat=s.wilcoxon_stat, wilcoxon_min_p=s.min_p, sign_min_p=s.min_p, p_one_sided_test="",
        family_size=None, contrast_n=None, contrast_sd=NAN, contrast_test="", gain_fraction_bounded=None,
        planned_effect_nats=NAN, power_at_max_seeds=NAN, missing_seeds="; ".join(c.missing),
        code_versions=" ".join(c.code_versions), level=NAN, look=None, n_looks=None, look_pairs=None,
        sequential_p=NAN)
    plan = rs.plan
    h = rs.headline(c.size, c.budget_tokens) if c.kind == "treatment_vs_parent" else None
    a = rs.assessment(c.first, c.size, c.budget_tokens) if c.kind == "control_vs_parent" else None
    aa = rs.aa_check(c.first, c.size, c.budget_tokens) if c.kind == "aa_check" else None
    if h is not None:
        row.update(p_one_sided=h.p_one_sided, holm_p=h.holm_p, verdict=h.verdict, reason=h.reason,
                   p_one_sided_test="exact sign-flip" if h.exact else "t", family_size=h.n_cells,
                   mde_nats=h.mde_nats, seeds_needed=h.seeds_needed.n, planned_effect_nats=plan.min_effect_nats,
                   power_at_max_seeds=h.seeds_needed.power_at_max)
        notes += [NOTE_DEGENERATE.format(reason=h.degenerate_reason)] if h.degenerate_reason else []
        row.update(_look_columns(h.look, h.level, h.sequential_p))
        notes += _look_notes(h.look, h.decided_look if h.established else 0)
        notes += _needed_notes(h.seeds_needed, plan.min_effect_nats)
    elif a is not None:
        row.update(holm_p=a.holm_p, contrast_mean=a.contrast_mean, contrast_p=a.contrast_p,
                   gain_fraction=a.fraction, gain_fraction_low=a.fraction_low, gain_fraction_high=a.fraction_high,
                   verdict=a.verdict, reason=a.reason, family_size=a.family_size or None, contrast_n=a.n,
                   contrast_sd=a.contrast_sd, contrast_test=("exact sign-flip" if a.exact else "t")
                   if math.isfinite(a.contrast_p) else "", gain_fraction_bounded=a.bounded,
                   mde_nats=a.mde_nats, seeds_needed=a.seeds_needed.n,
                   planned_effect_nats=NAN if a.planned_effect is None else a.planned_effect,
                   power_at_max_seeds=a.seeds_needed.power_at_max)
        notes += [NOTE_DEGENERATE.format(reason=a.degenerate_reason)] if a.degenerate_reason else []
        if math.isfinite(a.holm_p):  # tested: its look and level
            row.update(_look_columns(a.look, a.look.level, a.sequential_p))
            notes += _look_notes(a.look, 0)
        notes += [NOTE_UNBOUNDED] if math.isfinite(a.fraction) and not a.bounded else []
        notes += _needed_notes(a.seeds_needed, a.planned_effect)
    elif aa is not None:
        row.update(verdict=aa.status, holm_p=NAN)
    row["note"] = "; ".join(notes)
    return row


# --------------------------------------------------------------------------- analysis


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
    return AACheck(c.first, c.size, c.budget_tokens, int(d.size), max_abs, c.stats.mean, p, exact, tested,
                   status, gain, threshold, steps)


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
    pairing = pair_runs(final, runs, grid=grid, allow_partial=allow_partial, aa_variants=aa_variants)
    if plan is None:
        grid_runs = runs.filter(pl.col("grid") == grid) if grid is not None and "grid" in runs.columns else runs
        plan = plan_from_configs(grid_runs["config"].to_list() if "config" in grid_runs.columns else [])
    alpha, rho = plan.alpha, plan.reproduce_fraction
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
    for c in comparisons:
        if c.kind == "control_vs_parent" and c.stats.n and c.stats.ties == c.stats.n:
            key = (c.size, c.budget_tokens, c.first)
            degen[key] = "; ".join(x for x in (degen.get(key), ALL_ZERO_REASON) if x)

    cells = sorted({(s.size, s.budget_tokens) for s in pairing.sets}, key=cell_order)
    t = pairing.treatment
    headlines = _headlines(cells, sets, t, pairing.parent, degen, plan)
    assessments = []
    for size, budget in cells:
        assessments += _assess(size, budget, controls, sets, t, pairing.parent, degen, plan,
                               headlines.get((size, budget)))
    steps_of = steps_by_run(runs)
    aa = []
    for c in comparisons:
        if c.kind != "aa_check":
            continue
        ps = sets[(c.comparison, c.size, c.budget_tokens)]
        h = headlines.get((c.size, c.budget_tokens))
        steps = tuple(sorted({steps_of[r] for p in ps.pairs for r in (p.run_first, p.run_second) if r in steps_of}))
        aa.append(_aa_check(c, np.array([p.diff for p in ps.pairs]), h.mean if h and h.n else NAN, alpha, steps))
    mixed = [fit_mixed_model(pairing.usable, size, budget, pairing.parent) for size, budget in pairing.cells]
    warn += [f"mixed model size={m.size} budget_tokens={m.budget_tokens}: {w}" for m in mixed for w in m.warnings]
    if progress is None:
        progress = grid_progress(runs, None, grid=grid, queue_note="the queue was not read")
    return ReportStats(grid or "", plan, pairing.parent, t, controls, aa_set, pairing.references, tuple(comparisons),
                       tuple(headlines.values()), tuple(assessments), tuple(aa), tuple(_divergence(pairing, cells)),
                       pairing.pairs, pairing.left_out, tuple(mixed), tuple(warn), progress,
                       gain_vs_budget(comparisons, pairing.pairs))


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
        degenerate = degen.get((size, budget, treatment), "")
        rows.append((size, budget, d, _sequential(d, plan, dec.headline_p), degenerate))
    if not rows:
        return {}
    seq = [r[3] for r in rows]
    adj, est = dec.decide_headline(np.array([q.look.n for q in seq]), np.array([q.deciding_mean for q in seq]),
                                   np.array([q.sequential_p for q in seq]), plan.alpha,
                                   np.array([bool(r[4]) for r in rows]))
    n_cells = int(np.isfinite(adj).sum())
    out = {}
    for (size, budget, d, q, degenerate), hp, established in zip(rows, adj, est):
        n, mean, established = int(d.size), float(d.mean()) if d.size else NAN, bool(established)
        reason = (R_DEGENERATE if degenerate else R_ESTABLISHED if established else R_NO_LOOK
                  if q.look.before_first else R_FEW if n < paired.MIN_PAIRS else R_NOT_BETTER
                  if not d[:q.look.n].mean() < 0 else R_HOLM)
        verdict = dec.DEGENERATE if degenerate else dec.GAIN_ESTABLISHED if established else dec.GAIN_NOT_ESTABLISHED
        sd = _sd(d)
        p = NAN if degenerate else q.p  # a degenerate treatment is not tested
        out[(size, budget)] = Headline(
            size, budget, label, n, mean, sd, p, q.exact, float(hp), n_cells, q.look.level, established, verdict,
            reason, degenerate, look_mde(sd, n, plan, "one-sided"),
            planned_seeds(plan.min_effect_nats, sd, plan, "one-sided"), q.look,
            NAN if degenerate else q.sequential_p, q.decided_look)
    return out


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
        x = np.array([p.diff for p in cp.pairs if p.seed in d_tp])  # control - parent
        y = np.array([d_tp[s] for s in seeds])  # treatment - parent, same seeds
        e = dec.reproduction_contrast(x, y, plan.reproduce_fraction)
        degenerate = degen.get((size, budget, c), "")
        rows.append((c, seeds, x, y, e, _sequential(e, plan, dec.two_sided_p), degenerate))
    if not rows:
        return []
    adj, codes = dec.decide_controls(established, np.array([bool(r[6]) for r in rows]),
                                     np.array([r[5].look.n for r in rows]),
                                     np.array([r[5].deciding_mean for r in rows]),
                                     np.array([r[5].sequential_p for r in rows]), plan.alpha)
    fam = int(np.isfinite(adj).sum())
    planned = contrast_effect(plan.min_effect_nats, plan.reproduce_fraction)
    out = []
    for (c, seeds, x, y, e, q, degenerate), hp, code in zip(rows, adj, codes):
        n, code = int(e.size), int(code)
        mean_e = float(e.mean()) if n else NAN
        p, exact, seq = (q.p, q.exact, q.sequential_p) if math.isfinite(hp) else (NAN, False, NAN)  # untested
        reason = (R_DEGENERATE if degenerate else (R_NO_TREATMENT if head is None else R_NO_GAIN)
                  if not established else R_NO_LOOK if q.look.before_first else R_FEW if n < paired.MIN_PAIRS
                  else R_SIGNIFICANT if code in (dec.V_DOES_NOT, dec.V_REPRODUCES) else R_HOLM)
        sd_e = _sd(e)
        # Step 2 quantities only where step 2 runs (assessed, in the family).
        f = dec.fieller(x, y) if math.isfinite(hp) else dict(f=NAN, low=NAN, high=NAN, bounded=False)
        out.append(ControlAssessment(
            c, size, budget, n, seeds, mean_e, sd_e, p, exact, float(hp), fam if math.isfinite(hp) else 0,
            float(f["f"]), float(f["low"]), float(f["high"]), bool(f["bounded"]), dec.VERDICTS[code], reason,
            degenerate, look_mde(sd_e, n, plan, "two-sided"), planned,
            planned_seeds(planned, sd_e, plan, "two-sided"), q.look, seq))
    return out
