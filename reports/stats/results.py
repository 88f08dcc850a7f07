"""Result objects of the statistics plan (DESIGN section 6) and the ``stats.csv`` table.

:func:`reports.stats.analysis.analyze` returns a :class:`ReportStats`: frozen dataclasses with named
fields per comparison (:class:`Comparison`), per cell headline (:class:`Headline`), per
control (:class:`ControlAssessment`), the A/A check (:class:`AACheck`) and the divergence
table (:class:`DivergenceRow`). :meth:`ReportStats.to_frame` is ``stats.csv``, whose column
contract (DESIGN section 6: add, never rename) is :data:`CSV_COLUMNS`. Notes are short fixed
tags (``NOTE_*``); :mod:`reports.render.sections` words everything for people. Nothing here computes a
statistic.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import polars as pl

from harness.analysis_plan import AnalysisPlan
from reports.stats import paired_tests as paired
from reports.stats.budget import GainVsBudget
from reports.stats.floors import FLOOR_NATS
from reports.stats.looks import Look
from reports.stats.mixed import MixedModelCheck
from reports.stats.pairing import LeftOut, Pair, cell_order
from reports.stats.power import SeedsNeeded
from reports.stats.progress import GridProgress

NAN = float("nan")
AA_NOISE_FRACTION = 0.5  # A/A warns when max |d| >= this x |treatment's mean gain| (DESIGN 6)
AA_NOISE_ABS = 1e-3  # nats/token: the A/A warning threshold when there is no treatment gain
AA_STATUSES = ("bit-identical", "pass", "warn", "FAIL", "no pairs")  # AACheck.status values

# stats.csv column contract (DESIGN section 6), in order; extra columns follow.
CSV_COLUMNS = (
    "comparison",
    "kind",
    "size",
    "budget_tokens",
    "n_pairs",
    "seeds",
    "mean_diff",
    "ci_low",
    "ci_high",
    "sd",
    "d_z",
    "wins",
    "ppl_change",
    "t_p",
    "p_one_sided",
    "perm_p",
    "wilcoxon_p",
    "sign_p",
    "holm_p",
    "contrast_mean",
    "contrast_p",
    "gain_fraction",
    "gain_fraction_low",
    "gain_fraction_high",
    "verdict",
    "note",
    "mde_nats",
    "seeds_needed",
)
EXTRA_COLUMNS = (
    "first",
    "second",
    "reason",
    "t_stat",
    "df",
    "n_nonzero",
    "perm_min_p",
    "wilcoxon_stat",
    "wilcoxon_min_p",
    "sign_min_p",
    "p_one_sided_test",
    "family_size",
    "contrast_n",
    "contrast_sd",
    "contrast_test",
    "gain_fraction_bounded",
    "planned_effect_nats",
    "power_at_max_seeds",
    "missing_seeds",
    "code_versions",
    "level",
    "look",
    "n_looks",
    "look_pairs",
    "sequential_p",
    "test_pairs",
    "test_seeds",
    "imputed_seeds",
    "absence_p",
    "absence_holm_p",
    "gain_upper",
    "gain_upper_level",
    "numerical_floor",
)
KINDS = (
    "treatment_vs_parent",
    "control_vs_parent",
    "aa_check",
    "treatment_vs_control",
    "parent_vs_reference",
    "tuned_treatment_vs_parent",
    "factorial_simple",
    "factorial_main",
    "factorial_interaction",
)  # tuned: the [tuned] robustness row (reports.stats.robustness, DESIGN 9); factorial_*: DESIGN 12

# Short fixed note tags (stats.csv `note`; reports.render.sections words them).
NOTE_FEW = "fewer than 3 pairs: no test"
NOTE_ZERO_SPREAD = "zero spread: t undefined, the exact sign-flip p is the only p"
NOTE_ZEROS = "{k} zero difference(s) dropped by the Wilcoxon and sign tests"
NOTE_LOST = "unpaired seeds {seeds} (why: missing_seeds)"  # not run, failed or diverged
NOTE_UNBOUNDED = "gain fraction unbounded: the gain's 95 % interval covers 0"
NOTE_NO_EFFECT = "seeds_needed: no min_effect_nats in the plan"
NOTE_UNREACHABLE = "seeds_needed: not reachable at this budget (> max_seeds {max_seeds})"
NOTE_DEGENERATE = "degenerate: {reason}"
NOTE_NO_LOOK = "before the first look ({first} pairs): not tested yet"
NOTE_BETWEEN = "look {k} of {K} tests the first {n} of {pairs} pairs"
NOTE_EARLIER = "established at look {k} of {K}"
ALL_ZERO_REASON = (
    "paired differences with the parent within the numerical floor ({floor:g} nats/token) at every seed"
)
NOTE_IMPUTED = "seed(s) {seeds} count as losses (diverged: d = {values}, worst-case imputation)"
NOTE_DROPPED = "seed(s) {seeds} left out: both sides (or the parent) diverged"
NOTE_TEST_SEEDS = "the verdict uses {n} pair(s), seeds {seeds}"

# Reason tags of a headline or control verdict.
R_ESTABLISHED, R_FEW, R_NOT_BETTER, R_HOLM = (
    "established",
    "fewer than 3 pairs",
    "mean d >= 0",
    "Holm p >= alpha",
)
R_DEGENERATE, R_NO_GAIN, R_SIGNIFICANT = "degenerate", "gain not established", "Holm p < alpha"
R_NO_TREATMENT = "no treatment in this cell"
R_NO_LOOK = "before the first look"
R_ABSENT, R_FLOOR = "absent", "mean within the numerical floor"


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

    ``n``, ``mean`` and ``sd`` describe the tested differences (``seeds``): every pair, plus each
    seed where the treatment or the parent diverged and the other finished, counted as a loss for
    the one that diverged (``imputed``, :mod:`reports.stats.divergence`). ``verdict``: ``gain
    established``, ``gain absent (< delta nats/token)`` (``absent``; ``absence_p`` its one-sided p,
    ``absence_holm_p`` Holm over the cells, ``gain_upper`` the Holm-adjusted upper bound on the
    gain at level ``gain_upper_level``) or ``undecided`` (``seeds_establish`` / ``seeds_absent``:
    what would decide it), or ``invalid: degenerate``. ``p_one_sided`` is the one-sided t p (H1
    mean d < 0), or with zero spread the exact one-sided sign-flip p (``exact``), of the
    pairs the current look tests (``look``, :mod:`reports.stats.looks`: all pairs without looks,
    the first n_k with looks, none before the first look); ``level`` is that look's level
    (the spent increment Delta_k with looks, the plan's alpha without). ``sequential_p`` is
    the p Holm sees: the ordinary p without looks, else the smallest alpha whose spending
    would have rejected at one of the looks so far (``decided_look``, 1-based, is the look
    attaining it). ``holm_p`` is Holm-adjusted over the ``n_cells`` cells with a p;
    established where ``holm_p < alpha``. ``mde_nats`` is the gain detectable with the
    plan's power at this look (one-sided, the observed sd); ``seeds_needed`` is for the
    plan's ``min_effect_nats`` (:func:`reports.stats.power.planned_seeds`).
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
    absent: bool = False
    absence_p: float = (
        NAN  # one-sided p of H0 "gain >= delta" at the current look (reports.stats.decisions.absence_p)
    )
    absence_holm_p: float = NAN  # Holm over the cells of its sequential p
    gain_upper: float = NAN  # Holm-adjusted upper one-sided bound on the gain -mean d (nats/token)
    gain_upper_level: float = NAN  # the one-sided level of that bound
    seeds: tuple[int, ...] = ()  # seeds of the tested differences (observed and imputed), seed order
    imputed: tuple = ()  # reports.stats.divergence.Imputed: lost seeds counted as losses
    dropped: tuple[int, ...] = ()  # seeds left out: both runs diverged
    seeds_establish: SeedsNeeded | None = None  # seeds to establish the observed gain (undecided cells)
    seeds_absent: SeedsNeeded | None = None  # seeds to show the gain absent at the observed gain


@dataclass(frozen=True, slots=True)
class ControlAssessment:
    """Step 2 for one control in one cell: the reproduction contrast and the verdict.

    ``n``/``seeds``: seeds where control, parent and treatment all have a paired run, plus seeds
    where the control or the treatment diverged and the other two finished (``imputed``: a loss
    for the one that diverged, :mod:`reports.stats.divergence`). ``holm_p`` is over every assessed
    (cell, control) contrast of the grid (``family_size``); a definite verdict also needs
    |mean e| beyond the numerical floor (:mod:`reports.stats.floors`).
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
    imputed: tuple = ()  # reports.stats.divergence.Imputed: lost seeds counted as losses in the contrast
    dropped: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class AACheck:
    """The A/A check: a variant equal to the parent in exact arithmetic vs the parent.

    ``status``: ``bit-identical`` (every d exactly 0), ``FAIL`` (systematic offset: two-sided
    p, exact sign-flip at zero spread, Holm over the grid's ``n_cells`` A/A cells < alpha, and
    |mean| beyond ``floor``, the float32 rounding of the NLL), ``warn`` (max |d| >= ``threshold``: the
    numerical noise floor rivals the gain), ``noise floor`` (max |d| below it), ``no pairs``.
    ``tested`` is False with fewer than 3 pairs. ``threshold`` = 0.5 |gain| (gain = the
    treatment's mean d in the cell) or ``AA_NOISE_ABS`` without one. In no control family (its own: the cells).
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
    holm_p: float = NAN  # Holm over the cells' A/A offset tests (DESIGN 6)
    n_cells: int = 0
    floor: float = NAN  # the float32 rounding of the NLL (reports.stats.floors.aa_floor)
    imputed: tuple = ()  # reports.stats.divergence.Imputed: the A/A variant's lost seeds, counted as losses


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
    progress: GridProgress | None = None  # the queue's view next to the store's (reports.stats.progress)
    budget: GainVsBudget = field(
        default=GainVsBudget((), ())
    )  # gain vs budget (DESIGN 8): several budgets only
    robustness: tuple = ()  # reports.stats.robustness.TunedRow per cell: treatment (tuned) - parent (tuned), DESIGN 9
    plateau: tuple = ()  # reports.stats.plateau.PlateauRow per cell: final NLL next to the unigram plateau
    factorial: tuple = ()  # reports.stats.factorial.FactorialCell per cell of a grid with [factorial], DESIGN 12

    @property
    def cells(self) -> list[tuple[str, int]]:
        return sorted({(c.size, c.budget_tokens) for c in self.comparisons}, key=cell_order)

    def headline(self, size: str, budget: int) -> Headline | None:
        return next((h for h in self.headlines if (h.size, h.budget_tokens) == (size, budget)), None)

    def assessment(self, control: str, size: str, budget: int) -> ControlAssessment | None:
        return next(
            (a for a in self.assessments if (a.control, a.size, a.budget_tokens) == (control, size, budget)),
            None,
        )

    def aa_check(self, variant: str, size: str, budget: int) -> AACheck | None:
        return next(
            (a for a in self.aa_checks if (a.variant, a.size, a.budget_tokens) == (variant, size, budget)),
            None,
        )

    def diverged(self) -> list[DivergenceRow]:
        """Divergence rows of variants that diverged at some seed (flagged at the top)."""
        return [r for r in self.divergence if r.diverged]

    def to_frame(self) -> pl.DataFrame:
        """``stats.csv``: one row per comparison, then one per factorial contrast (kinds ``factorial_*``);
        contract columns then extra columns."""
        rows = [_row(self, c) for c in self.comparisons]
        rows += [_factorial_row(self, f) for cell in self.factorial for f in cell.contrasts]
        cols = CSV_COLUMNS + EXTRA_COLUMNS
        return pl.DataFrame(rows).select(cols) if rows else pl.DataFrame({c: [] for c in cols})

    def pairs_frame(self) -> pl.DataFrame:
        """All matched pairs: comparison, size, budget, seed, run ids, NLLs, diff."""
        cols = list(Pair.__slots__)
        return pl.DataFrame(
            [{c: getattr(p, c) for c in cols} for p in self.pairs],
            schema={c: None for c in cols} if not self.pairs else None,
        )


def _needed_notes(s: SeedsNeeded, planned: float | None) -> list[str]:
    if planned is None:
        return [NOTE_NO_EFFECT]
    return (
        [] if s.reachable or math.isnan(s.power_at_max) else [NOTE_UNREACHABLE.format(max_seeds=s.max_seeds)]
    )


def _look_columns(look: Look, level: float, seq: float) -> dict:
    return dict(
        level=level,
        look=look.k if look.planned else None,
        n_looks=look.n_looks or None,
        look_pairs=look.n,
        sequential_p=seq,
    )


def _look_notes(look: Look, decided: int) -> list[str]:
    if look.before_first:
        return [NOTE_NO_LOOK.format(first=look.next_n)]
    notes = (
        [NOTE_BETWEEN.format(k=look.k, K=look.n_looks, n=look.n, pairs=look.pairs)]
        if (look.planned and look.n < look.pairs)
        else []
    )
    return notes + ([NOTE_EARLIER.format(k=decided, K=look.n_looks)] if 0 < decided < look.k else [])


def _tested_columns(seeds: tuple[int, ...], imputed: tuple) -> dict:
    return dict(
        test_pairs=len(seeds),
        test_seeds=" ".join(map(str, seeds)),
        imputed_seeds=" ".join(str(i.seed) for i in imputed),
    )


def _tested_notes(
    described: tuple[int, ...], tested: tuple[int, ...], imputed: tuple, dropped: tuple
) -> list[str]:
    """Notes when the verdict's seeds differ from the row's descriptive pairs (lost or imputed seeds)."""
    notes = (
        [
            NOTE_IMPUTED.format(
                seeds=", ".join(str(i.seed) for i in imputed),
                values=", ".join(f"{i.value:+.4g}" for i in imputed),
            )
        ]
        if imputed
        else []
    )
    notes += [NOTE_DROPPED.format(seeds=", ".join(map(str, dropped)))] if dropped else []
    if tuple(tested) != tuple(described):
        notes.append(NOTE_TEST_SEEDS.format(n=len(tested), seeds=" ".join(map(str, tested)) or "none"))
    return notes


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
        comparison=c.comparison,
        kind=c.kind,
        size=c.size,
        budget_tokens=c.budget_tokens,
        n_pairs=s.n,
        seeds=" ".join(map(str, c.seeds)),
        mean_diff=s.mean,
        ci_low=s.ci_low,
        ci_high=s.ci_high,
        sd=s.sd,
        d_z=s.d_z,
        wins=f"{s.wins}/{s.n}",
        ppl_change=s.ppl_change,
        t_p=s.t_p,
        p_one_sided=NAN,
        perm_p=s.perm_p,
        wilcoxon_p=s.wilcoxon_p,
        sign_p=s.sign_p,
        holm_p=NAN,
        contrast_mean=NAN,
        contrast_p=NAN,
        gain_fraction=NAN,
        gain_fraction_low=NAN,
        gain_fraction_high=NAN,
        verdict="",
        mde_nats=NAN,
        seeds_needed=None,
        first=c.first,
        second=c.second,
        reason="",
        t_stat=s.t_stat,
        df=s.n - 1 if s.n >= paired.MIN_PAIRS else None,
        n_nonzero=s.n_nonzero,
        perm_min_p=s.min_p,
        wilcoxon_stat=s.wilcoxon_stat,
        wilcoxon_min_p=s.min_p,
        sign_min_p=s.min_p,
        p_one_sided_test="",
        family_size=None,
        contrast_n=None,
        contrast_sd=NAN,
        contrast_test="",
        gain_fraction_bounded=None,
        planned_effect_nats=NAN,
        power_at_max_seeds=NAN,
        missing_seeds="; ".join(c.missing),
        code_versions=" ".join(c.code_versions),
        level=NAN,
        look=None,
        n_looks=None,
        look_pairs=None,
        sequential_p=NAN,
        test_pairs=None,
        test_seeds="",
        imputed_seeds="",
        absence_p=NAN,
        absence_holm_p=NAN,
        gain_upper=NAN,
        gain_upper_level=NAN,
        numerical_floor=NAN,
    )
    h = rs.headline(c.size, c.budget_tokens) if c.kind == "treatment_vs_parent" else None
    a = rs.assessment(c.first, c.size, c.budget_tokens) if c.kind == "control_vs_parent" else None
    aa = rs.aa_check(c.first, c.size, c.budget_tokens) if c.kind == "aa_check" else None
    if h is not None:
        notes += _headline_columns(row, h, c, rs.plan)
    elif a is not None:
        notes += _control_columns(row, a, c)
    elif aa is not None:
        row.update(
            verdict=aa.status,
            holm_p=aa.holm_p,
            family_size=aa.n_cells or None,
            numerical_floor=aa.floor,
            imputed_seeds=" ".join(str(i.seed) for i in aa.imputed),
        )
        notes += _tested_notes((), (), aa.imputed, ())
    elif c.kind == "tuned_treatment_vs_parent":
        r = next(x for x in rs.robustness if x.comparison is c)
        row.update(p_one_sided=r.p_one_sided, p_one_sided_test="exact sign-flip" if r.exact else "t")
        notes.append(
            "robustness row (descriptive, in no family); tuned fields: " + ("; ".join(r.fields) or "none")
        )
    row["note"] = "; ".join(notes)
    return row


def _headline_columns(row: dict, h: Headline, c: Comparison, plan: AnalysisPlan) -> list[str]:
    """Fill ``row`` with the headline's columns (step 1); returns its notes."""
    row.update(
        p_one_sided=h.p_one_sided,
        holm_p=h.holm_p,
        verdict=h.verdict,
        reason=h.reason,
        p_one_sided_test="exact sign-flip" if h.exact else "t",
        family_size=h.n_cells,
        mde_nats=h.mde_nats,
        seeds_needed=h.seeds_needed.n,
        planned_effect_nats=plan.min_effect_nats,
        power_at_max_seeds=h.seeds_needed.power_at_max,
    )
    notes = [NOTE_DEGENERATE.format(reason=h.degenerate_reason)] if h.degenerate_reason else []
    row.update(_look_columns(h.look, h.level, h.sequential_p))
    row.update(
        _tested_columns(h.seeds, h.imputed),
        absence_p=h.absence_p,
        absence_holm_p=h.absence_holm_p,
        gain_upper=h.gain_upper,
        gain_upper_level=h.gain_upper_level,
        numerical_floor=FLOOR_NATS,
    )
    notes += _tested_notes(c.seeds, h.seeds, h.imputed, h.dropped)
    notes += _look_notes(h.look, h.decided_look if h.established else 0)
    return notes + _needed_notes(h.seeds_needed, plan.min_effect_nats)


def _control_columns(row: dict, a: ControlAssessment, c: Comparison) -> list[str]:
    """Fill ``row`` with a control's columns (step 2); returns its notes."""
    row.update(
        holm_p=a.holm_p,
        contrast_mean=a.contrast_mean,
        contrast_p=a.contrast_p,
        gain_fraction=a.fraction,
        gain_fraction_low=a.fraction_low,
        gain_fraction_high=a.fraction_high,
        verdict=a.verdict,
        reason=a.reason,
        family_size=a.family_size or None,
        contrast_n=a.n,
        contrast_sd=a.contrast_sd,
        contrast_test=("exact sign-flip" if a.exact else "t") if math.isfinite(a.contrast_p) else "",
        gain_fraction_bounded=a.bounded,
        mde_nats=a.mde_nats,
        seeds_needed=a.seeds_needed.n,
        planned_effect_nats=NAN if a.planned_effect is None else a.planned_effect,
        power_at_max_seeds=a.seeds_needed.power_at_max,
    )
    notes = [NOTE_DEGENERATE.format(reason=a.degenerate_reason)] if a.degenerate_reason else []
    row.update(_tested_columns(a.seeds, a.imputed), numerical_floor=FLOOR_NATS)
    notes += _tested_notes(c.seeds, a.seeds, a.imputed, a.dropped)
    if math.isfinite(a.holm_p):  # tested: its look and level
        row.update(_look_columns(a.look, a.look.level, a.sequential_p))
        notes += _look_notes(a.look, 0)
    notes += [NOTE_UNBOUNDED] if math.isfinite(a.fraction) and not a.bounded else []
    return notes + _needed_notes(a.seeds_needed, a.planned_effect)


# --------------------------------------------------------------------------- analysis


def _factorial_row(rs: ReportStats, f) -> dict:
    """The ``stats.csv`` row of one factorial contrast (:class:`reports.stats.factorial.FactorialContrast`):
    descriptives of its observed seeds, then its test, Holm p over the factorial family and verdict."""
    row = _row(rs, f.comparison)
    tested = math.isfinite(f.p)
    row.update(
        ppl_change=row["ppl_change"] if f.comparison.kind == "factorial_simple" else NAN,
        holm_p=f.holm_p,
        contrast_mean=f.mean,
        contrast_p=f.p,
        verdict=f.verdict,
        reason=f.reason,
        family_size=f.family_size or None,
        contrast_n=f.n,
        contrast_sd=f.sd,
        contrast_test=("exact sign-flip" if f.exact else "t") if tested else "",
        mde_nats=f.mde_nats,
        seeds_needed=f.seeds_needed.n,
        planned_effect_nats=NAN if rs.plan.min_effect_nats is None else rs.plan.min_effect_nats,
        power_at_max_seeds=f.seeds_needed.power_at_max,
        numerical_floor=FLOOR_NATS,
    )
    row.update(_tested_columns(f.seeds, f.imputed))
    notes = [row["note"]] if row["note"] else []
    notes += _tested_notes(f.comparison.seeds, f.seeds, f.imputed, f.dropped)
    if tested:
        row.update(_look_columns(f.look, f.look.level, f.sequential_p))
        notes += _look_notes(f.look, f.decided_look if f.established else 0)
    row["note"] = "; ".join(notes + _needed_notes(f.seeds_needed, rs.plan.min_effect_nats))
    return row
