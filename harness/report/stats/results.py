"""Result objects of the statistics plan (DESIGN section 6) and the ``stats.csv`` table.

:func:`harness.report.stats.analysis.analyze` returns a :class:`ReportStats`: frozen dataclasses with named
fields per comparison (:class:`Comparison`), per cell headline (:class:`Headline`), per
control (:class:`ControlAssessment`), the A/A check (:class:`AACheck`) and the divergence
table (:class:`DivergenceRow`). :meth:`ReportStats.to_frame` is ``stats.csv``, written by
:mod:`harness.report.stats.stats_table`, whose column contract (DESIGN section 6: add, never rename) is
:data:`CSV_COLUMNS`. :mod:`harness.report.render.sections` words everything for people. Nothing here computes a
statistic.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from harness.design.analysis_plan import AnalysisPlan
from harness.report.stats.budget import GainVsBudget
from harness.report.stats.looks import Look
from harness.report.stats.mixed import MixedModelCheck
from harness.report.stats.pairing import LeftOut, Pair, cell_order
from harness.report.stats.power import SeedsNeeded
from harness.report.stats.progress import GridProgress
from harness.report.stats.stats_table import (
    stats_frame,
)

NAN = float("nan")
AA_NOISE_FRACTION = 0.5  # A/A warns when max |d| >= this x |treatment's mean gain| (DESIGN 6)
AA_NOISE_ABS = 1e-3  # nats/token: the A/A warning threshold when there is no treatment gain
AA_STATUSES = ("bit-identical", "pass", "warn", "FAIL", "no pairs")  # AACheck.status values

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
)  # tuned: the [tuned] robustness row (harness.report.stats.robustness, DESIGN 9); factorial_*: DESIGN 12

ALL_ZERO_REASON = (
    "paired differences with the parent within the numerical floor ({floor:g} nats/token) at every seed"
)

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
    the one that diverged (``imputed``, :mod:`harness.report.stats.divergence`). ``verdict``: ``gain
    established``, ``gain absent (< delta nats/token)`` (``absent``; ``absence_p`` its one-sided p,
    ``absence_holm_p`` Holm over the cells, ``gain_upper`` the Holm-adjusted upper bound on the
    gain at level ``gain_upper_level``) or ``undecided`` (``seeds_establish`` / ``seeds_absent``:
    what would decide it), or ``invalid: degenerate``. ``p_one_sided`` is the one-sided t p (H1
    mean d < 0), or with zero spread the exact one-sided sign-flip p (``exact``), of the
    pairs the current look tests (``look``, :mod:`harness.report.stats.looks`: all pairs without looks,
    the first n_k with looks, none before the first look); ``level`` is that look's level
    (the spent increment Delta_k with looks, the plan's alpha without). ``sequential_p`` is
    the p Holm sees: the ordinary p without looks, else the smallest alpha whose spending
    would have rejected at one of the looks so far (``decided_look``, 1-based, is the look
    attaining it). ``holm_p`` is Holm-adjusted over the ``n_cells`` cells with a p;
    established where ``holm_p < alpha``. ``mde_nats`` is the gain detectable with the
    plan's power at this look (one-sided, the observed sd); ``seeds_needed`` is for the
    plan's ``min_effect_nats`` (:func:`harness.report.stats.power.planned_seeds`).
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
    absence_p: float = NAN  # one-sided p of H0 "gain >= delta" at the current look (harness.report.stats.decisions.absence_p)
    absence_holm_p: float = NAN  # Holm over the cells of its sequential p
    gain_upper: float = NAN  # Holm-adjusted upper one-sided bound on the gain -mean d (nats/token)
    gain_upper_level: float = NAN  # the one-sided level of that bound
    seeds: tuple[int, ...] = ()  # seeds of the tested differences (observed and imputed), seed order
    imputed: tuple = ()  # harness.report.stats.divergence.Imputed: lost seeds counted as losses
    dropped: tuple[int, ...] = ()  # seeds left out: both runs diverged
    seeds_establish: SeedsNeeded | None = None  # seeds to establish the observed gain (undecided cells)
    seeds_absent: SeedsNeeded | None = None  # seeds to show the gain absent at the observed gain


@dataclass(frozen=True, slots=True)
class ControlAssessment:
    """Step 2 for one control in one cell: the reproduction contrast and the verdict.

    ``n``/``seeds``: seeds where control, parent and treatment all have a paired run, plus seeds
    where the control or the treatment diverged and the other two finished (``imputed``: a loss
    for the one that diverged, :mod:`harness.report.stats.divergence`). ``holm_p`` is over every assessed
    (cell, control) contrast of the grid (``family_size``); a definite verdict also needs
    |mean e| beyond the numerical floor (:mod:`harness.report.stats.floors`).
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
    imputed: tuple = ()  # harness.report.stats.divergence.Imputed: lost seeds counted as losses in the contrast
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
    floor: float = NAN  # the float32 rounding of the NLL (harness.report.stats.floors.aa_floor)
    imputed: tuple = ()  # harness.report.stats.divergence.Imputed: the A/A variant's lost seeds, counted as losses


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
    progress: GridProgress | None = (
        None  # the queue's view next to the store's (harness.report.stats.progress)
    )
    budget: GainVsBudget = field(
        default=GainVsBudget((), ())
    )  # gain vs budget (DESIGN 8): several budgets only
    robustness: tuple = ()  # harness.report.stats.robustness.TunedRow per cell: treatment (tuned) - parent (tuned), DESIGN 9
    plateau: tuple = ()  # harness.report.stats.plateau.PlateauRow per cell: final NLL next to the unigram plateau
    factorial: tuple = ()  # harness.report.stats.factorial.FactorialCell per cell of a grid with [factorial], DESIGN 12
    influence: tuple = ()  # harness.report.stats.leave_one_out.SeedInfluence per established verdict (descriptive)

    def seed_influence(self, kind: str, comparison: str, size: str, budget: int):
        """The :class:`harness.report.stats.leave_one_out.SeedInfluence` of one established verdict, or None."""
        key = (kind, comparison, size, budget)
        return next(
            (i for i in self.influence if (i.kind, i.comparison, i.size, i.budget_tokens) == key), None
        )

    provenance: object = None  # harness.report.stats.provenance.Provenance: where the runs ran, DESIGN 13
    multipliers: object = (
        None  # harness.report.stats.multiplier.MultiplierStats: does the gain pay, DESIGN 14
    )

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
        contract columns then extra columns (:func:`harness.report.stats.stats_table.stats_frame`)."""
        return stats_frame(self)

    def pairs_frame(self) -> pl.DataFrame:
        """All matched pairs: comparison, size, budget, seed, run ids, NLLs, diff."""
        cols = list(Pair.__slots__)
        return pl.DataFrame(
            [{c: getattr(p, c) for c in cols} for p in self.pairs],
            schema={c: None for c in cols} if not self.pairs else None,
        )
