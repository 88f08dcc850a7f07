"""Where a grid's runs ran (DESIGN section 13): hardware classes, training commits, and the
variant x hardware check of a grid that mixes classes.

A run's *hardware class* is ``runs.hardware`` (a short key of what changes numerics: device model,
precision, torch version, compile). Runs written before it was recorded read as :data:`UNKNOWN`
(NULL or empty too), never a guess. Floats are bit-identical on one machine only, so a pair whose
two runs ran on different classes (*straddling*) carries the difference between the machines in its
paired difference, and a comparison whose two variants sit on the classes in different shares
(*imbalanced*) lets a class effect bias its mean. A class is a name only: every row that is not a class
(the straddling pairs) is marked by a field, never by a name a class could also have.

A run's *numerics* is the training code's numerics identifier (``runs.numerics``: ``two_phase/2``,
``per_site/1``; code that re-rounds a run is provenance too, :mod:`harness.models.numerics`). A run written
before it was recorded reads as its training commit implies where that is known
(:func:`harness.models.numerics.implied_numerics`), else :data:`UNKNOWN`. The settings that re-round a run
beside its code (its numerics key, :func:`harness.models.numerics.numerics_key`) are read from ``runs.micro_batch_size``
and ``runs.world_size`` (:func:`settings_by_run`; missing is :data:`UNKNOWN`): a pair whose two runs differ in
either is named in words (:class:`SettingsStraddle`), since gradient accumulation over another split, or ranks
summing in another order, re-round a run as another code does (DESIGN section 13).

Computed here, per grid (the frozen protocol's finished runs; the ``[tuned]`` runs are left out):

* per variant: its classes, numerics and commits (``runs.code_version``, ``-dirty`` kept) with run counts;
  over the grid, its numerics and the pairs whose two runs trained with different numerics;
* per comparison and cell, the **balance**: the class x variant table of its paired runs, *balanced* when
  every class holds as many of the first variant's paired runs as of the second's (a class's offset then
  cancels in the mean paired difference). Only a straddling pair can unbalance it (a pair on one class
  adds a run of each side to that class), so its strength is judged on the straddling pairs, as pairs:
  under H0 "which side ran on which class is chance" each straddling pair's orientation (first on class a,
  second on b, or the reverse) is a fair coin, and :func:`~harness.report.stats.class_tests.orientation_test` is the exact test of that
  symmetry (the sign test for two classes; for more, exact enumeration of the coins per pair of classes
  with Bowker's statistic as the order). A test on the class x variant table of runs (Fisher's exact,
  chi-square) would count the two runs of a pair as independent draws;
* with several classes, per comparison and cell, the **agreement** of the classes: the paired differences of
  the pairs whose two runs share a class, per class (n, mean, 95 % t interval), the straddling pairs in a
  row of their own (in no test), and a test of H0 "the hardware does not move this comparison": Welch's
  heteroscedastic F (Welch 1951) of the classes' means as the statistic, its p the larger of two
  (:func:`~harness.report.stats.class_tests.class_agreement`): by permutation of the class labels over the
  pairs (every distinct relabelling where there are at most :data:`~harness.report.stats.class_tests.EXACT_LIMIT`,
  else :data:`~harness.report.stats.class_tests.PERMUTATIONS` seeded draws), exact when the hardware changes
  nothing (the pairs then exchangeable across classes) at any split, and from the F law on (k - 1, the
  smallest class's pairs - 1) df (:func:`~harness.report.stats.class_tests.spread_p`), whose level holds when
  the hardware changes only a class's spread, where a permutation is liberal (a 3-pair class 3x as noisy at
  18:3 and 24:3: one test alone 10 % by permutation, 3.4-3.9 % with both; the grid's banner within alpha +
  2 SE at every split simulated; DESIGN section 13). A class enters the test with at least :data:`MIN_CLASS_PAIRS` pairs and a non-zero spread; below, its
  row reads "too few pairs to tell" (the floor, simulated in :mod:`harness.report.simulation.provenance`). A test
  whose smallest attainable p is not below alpha (3 + 3 pairs: 0.1) is not run ("too few pairs to tell").
  Holm across the grid's agreement tests; each prints its MDE (:func:`~harness.report.stats.class_tests.agreement_mde`: the smallest shift of
  one class against the others it detects with power 0.8 at Holm's first-step level, noncentral F);
* with several classes, every verdict re-decided on the runs of the largest class alone (the most
  finished runs; a tie goes to the first name in sort order): descriptive, in no family; the
  re-analysis itself is the report's own (:func:`harness.report.build.compute_stats` passes it in). Beside
  each, the power of that re-decision (:func:`redecision_power`: the class's pairs against the pooled
  effect, at the within-class test's level) and whether it holds (:func:`within_status`): a definite verdict
  the class does not reach is "not re-decidable at N pairs" where that power is below the plan's, "NO"
  only where the class decides otherwise or had the power to decide the same; "too few pairs to tell" where the
  class holds fewer pairs than the paired test needs (it re-decides nothing, whatever it reads), and "nothing to
  hold" where the pooled verdict decided nothing (an undecided verdict staying undecided is no evidence). Classes
  tied for the most runs are named as tied, never one of them as "the largest".
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import polars as pl

from harness.common.terms import UNKNOWN
from harness.models.numerics import run_numerics_of
from harness.report.stats import decisions as dec
from harness.report.stats import paired_tests as paired
from harness.report.stats.class_tests import (
    PERMUTATIONS,
    SEED,
    agreement_mde,
    class_agreement,
    orientation_test,
)
from harness.report.stats.pairing import cell_order
from harness.report.stats.power import power_at
from harness.report.stats.results import ReportStats

TOO_FEW = "too few pairs to tell"
# a class at the floor with a spread, in a comparison whose agreement test did not run (ClassDiffs.status)
NO_TEST_RAN = "no test ran"
# a pooled verdict that decided nothing has nothing to hold within a class (within_status)
NOTHING_TO_HOLD = "nothing to hold (no definite verdict)"
MIN_CLASS_PAIRS = 3  # a class with fewer pairs enters no agreement test (module docstring)
CHECKED_KINDS = (
    "treatment_vs_parent",
    "control_vs_parent",
    "aa_check",
    "treatment_vs_control",
    "parent_vs_reference",
)  # the frozen protocol's comparisons (not the [tuned] row, not the factorial contrasts)
YES, NO = "yes", "NO"
DEFINITE = (
    dec.GAIN_ESTABLISHED,
    dec.REPRODUCES,
    dec.DOES_NOT_REPRODUCE,
    dec.DEGENERATE,
    "FAIL",
)  # verdicts that decide something (gain absent too, by its prefix): the rest say nothing was decided


def not_redecidable(n: int) -> str:
    """The within-class status of a verdict the class lacks the power to reach again."""
    return f"not re-decidable at {n} pairs"


@dataclass(frozen=True, slots=True)
class VariantProvenance:
    """One variant's finished runs: ``classes``, ``commits`` and ``numerics`` as ``(name, runs)``, most runs
    first."""

    variant: str
    runs: int
    classes: tuple[tuple[str, int], ...]
    commits: tuple[tuple[str, int], ...]
    numerics: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True, slots=True)
class ClassBalance:
    """The class x variant table of one comparison's paired runs in one cell.

    ``table``: ``(class, runs of first, runs of second)`` per class. ``balanced``: equal counts in every
    class. ``oriented``: ``((class of first, class of second), pairs)`` over the straddling pairs.
    ``p``: the two-sided p of :func:`~harness.report.stats.class_tests.orientation_test` on them (NaN without a straddling pair; ``test``
    names the test, empty then).
    """

    comparison: str
    size: str
    budget_tokens: int
    table: tuple[tuple[str, int, int], ...]
    balanced: bool
    p: float
    test: str
    oriented: tuple[tuple[tuple[str, str], int], ...] = ()


@dataclass(frozen=True, slots=True)
class StraddlingPair:
    """A pair whose two runs ran on different hardware classes."""

    comparison: str
    size: str
    budget_tokens: int
    seed: int
    class_first: str
    class_second: str


@dataclass(frozen=True, slots=True)
class SettingsStraddle:
    """A pair whose two runs trained at different re-rounding settings (micro-batch size or world size, as
    recorded; :data:`UNKNOWN` where not): ``runs`` is ``((variant, micro-batch, world size), ...)`` of its first
    and second run."""

    size: str
    budget_tokens: int
    seed: int
    runs: tuple[tuple[str, str, str], tuple[str, str, str]]

    def words(self) -> str:
        """The pair in words, naming only what differs: ``seed 1: block_attnres at micro-batch 1, rd_attnres at 16``
        (with ``on N rank(s)`` where the world sizes differ)."""
        (va, ma, wa), (vb, mb, wb) = self.runs
        micro, world = ma != mb, wa != wb

        def one(variant: str, m: str, w: str, first: bool) -> str:
            text = variant
            if micro:
                text += f" at micro-batch {m}" if first else f" at {m}"
            if world:
                text += f" on {w} rank{'' if w == '1' else 's'}"
            return text

        return f"seed {self.seed}: {one(va, ma, wa, True)}, {one(vb, mb, wb, False)}"


@dataclass(frozen=True, slots=True)
class ClassDiffs:
    """The paired differences (nats/token) of one class, or of the straddling pairs (``straddling``, with
    ``hardware`` None): n, mean, sd and the 95 % t interval (NaN below 3 pairs or at zero spread), and
    ``status``: ``tested`` (in the agreement test that ran), :data:`NO_TEST_RAN` (at the floor with a spread,
    but the comparison's test did not run: too few other classes, or a smallest p not below alpha),
    :data:`TOO_FEW` (below :data:`MIN_CLASS_PAIRS`), ``zero spread`` or, for the straddling pairs, ``in no test``."""

    hardware: str | None
    n: int
    mean: float
    sd: float
    ci_low: float
    ci_high: float
    straddling: bool = False
    status: str = "tested"


@dataclass(frozen=True, slots=True)
class ClassCheck:
    """One comparison in one cell with its pairs split by class.

    ``tested``: the classes in the agreement test (>= :data:`MIN_CLASS_PAIRS` pairs, non-zero spread), empty
    where no test ran (a class is never shown as tested by a test that did not run);
    ``f``, ``df1``, ``df2``, ``p``, ``exact``, ``min_p``, ``p_permutation``, ``p_spread``:
    :class:`~harness.report.stats.class_tests.Agreement` of H0 "every class's mean paired difference is the same"; ``holm_p``: Holm across the grid's agreement tests; ``mde_nats`` the smallest
    shift of one class against the rest it detects (power 0.8) at ``level``, Holm's first step (alpha / the
    grid's agreement tests). NaN where no test ran: ``note`` then says why (it starts with :data:`TOO_FEW`
    where pairs are what is missing). ``min_p`` is kept where the test was not run because it is not below
    alpha (:attr:`unreachable`): the reason the report gives then, apart from a class with too few pairs.
    """

    comparison: str
    kind: str
    size: str
    budget_tokens: int
    rows: tuple[ClassDiffs, ...]
    tested: tuple[str, ...]
    f: float
    df1: float
    df2: float
    p: float
    note: str
    exact: bool = False
    min_p: float = math.nan
    holm_p: float = math.nan
    mde_nats: float = math.nan
    level: float = math.nan

    alpha: float = 0.05
    p_permutation: float = math.nan
    p_spread: float = math.nan

    @property
    def disagree(self) -> bool:
        """The classes are shown to disagree: Holm p below alpha."""
        return math.isfinite(self.holm_p) and self.holm_p < self.alpha

    @property
    def unreachable(self) -> bool:
        """No test ran although two or more classes have enough pairs and a spread: the smallest p their
        sizes allow (``min_p``) is not below alpha."""
        return not math.isfinite(self.p) and math.isfinite(self.min_p)


@dataclass(frozen=True, slots=True)
class ClassVerdict:
    """A verdict of the whole grid next to the same decision on the largest class's runs alone, the power
    of that re-decision (NaN where the pooled verdict decided nothing) and ``status``
    (:func:`within_status`)."""

    size: str
    budget_tokens: int
    what: str  # "headline", a control's name or "A/A <variant>"
    verdict_all: str
    verdict_within: str
    n_within: int
    power: float = math.nan
    status: str = ""

    @property
    def holds(self) -> bool:
        """The verdict holds within the class: the same definite verdict on enough pairs (``status`` yes), not
        merely the same words (an undecided verdict staying undecided, or one re-decided on 1 pair)."""
        return self.status == YES


@dataclass(frozen=True, slots=True)
class Provenance:
    """Where one grid's finished runs ran (see the module docstring).

    ``classes``: ``(class, runs)`` over the grid, most first. ``largest``: the largest class where the
    grid mixes classes, else None (a tie: the first by name, :attr:`tied` the others). ``within``: every
    verdict re-decided within it; ``within_note``: why that could not be done, if so. ``alpha``, ``power``: the plan's (the agreement tests' level, the power
    an MDE and a re-decision are judged at). ``numerics``: ``(numerics, runs)`` over the grid, most first;
    ``numerics_straddling``: the pairs (of the checked comparisons) whose two runs differ in numerics.
    ``settings``: ``("micro-batch M, world size W", runs)`` over the grid, most first; ``settings_straddling``: the
    pairs of two runs (of the checked comparisons, each pair of runs once) whose settings differ.
    """

    runs: int
    classes: tuple[tuple[str, int], ...]
    variants: tuple[VariantProvenance, ...]
    balance: tuple[ClassBalance, ...]
    straddling: tuple[StraddlingPair, ...]
    checks: tuple[ClassCheck, ...]
    largest: str | None = None
    within: tuple[ClassVerdict, ...] = ()
    within_note: str = ""
    alpha: float = 0.05
    power: float = 0.8
    numerics: tuple[tuple[str, int], ...] = ()
    numerics_straddling: int = 0
    settings: tuple[tuple[str, int], ...] = ()
    settings_straddling: tuple[SettingsStraddle, ...] = ()

    @property
    def mixed(self) -> bool:
        return len(self.classes) > 1

    @property
    def tied(self) -> tuple[str, ...]:
        """The classes with as many finished runs as :attr:`largest`, other than it: where there are any, no
        class is "the largest" and the report says the tie."""
        if self.largest is None:
            return ()
        most = dict(self.classes)[self.largest]
        return tuple(c for c, n in self.classes if n == most and c != self.largest)

    @property
    def numerics_mixed(self) -> bool:
        """Whether the runs differ in any part of their numerics key: code, micro-batch size or world size."""
        return len(self.numerics) > 1 or self.settings_mixed

    @property
    def settings_mixed(self) -> bool:
        return len(self.settings) > 1

    @property
    def all_unknown(self) -> bool:
        return [c for c, _ in self.classes] == [UNKNOWN]

    @property
    def imbalanced(self) -> tuple[ClassBalance, ...]:
        return tuple(b for b in self.balance if not b.balanced)

    @property
    def disagreements(self) -> tuple[ClassCheck, ...]:
        """The agreement tests whose classes are shown to disagree (Holm p < alpha), smallest p first."""
        return tuple(sorted((c for c in self.checks if c.disagree), key=lambda c: c.holm_p))


def hardware_by_run(runs: pl.DataFrame) -> dict[str, str]:
    """``run_id -> hardware class``; a missing column, NULL or empty string is :data:`UNKNOWN`."""
    if "hardware" not in runs.columns:
        return dict.fromkeys(runs["run_id"].to_list(), UNKNOWN)
    return {rid: (hw or UNKNOWN) for rid, hw in runs.select("run_id", "hardware").iter_rows()}


def numerics_by_run(runs: pl.DataFrame) -> dict[str, str]:
    """``run_id -> numerics``: ``runs.numerics`` where recorded, else what ``runs.code_version`` implies
    (:func:`harness.models.numerics.run_numerics_of`), else :data:`UNKNOWN`."""
    recorded = runs["numerics"].to_list() if "numerics" in runs.columns else [None] * runs.height
    commits = runs["code_version"].to_list() if "code_version" in runs.columns else [None] * runs.height
    return {
        rid: run_numerics_of(num, cv)
        for rid, num, cv in zip(runs["run_id"].to_list(), recorded, commits, strict=True)
    }


def settings_by_run(runs: pl.DataFrame) -> dict[str, tuple[str, str]]:
    """``run_id -> (micro-batch size, world size)`` as recorded (``runs.micro_batch_size``, ``runs.world_size``),
    each as text; a missing column or NULL is :data:`UNKNOWN`, never guessed."""

    def column(name: str) -> list:
        return runs[name].to_list() if name in runs.columns else [None] * runs.height

    return {
        rid: (UNKNOWN if m is None else str(m), UNKNOWN if w is None else str(w))
        for rid, m, w in zip(
            runs["run_id"].to_list(), column("micro_batch_size"), column("world_size"), strict=True
        )
    }


def settings_text(micro: str, world: str) -> str:
    """``micro-batch M, world size W``: the re-rounding settings of a numerics key
    (:func:`harness.models.numerics.numerics_key`) without the code's identifier."""
    return f"micro-batch {micro}, world size {world}"


def _counts(values) -> tuple[tuple[str, int], ...]:
    """``(value, count)``, most first, then by name."""
    return tuple(sorted(Counter(values).items(), key=lambda kv: (-kv[1], kv[0])))


def class_balance(comparison: str, size: str, budget: int, pairs, hw: dict[str, str]) -> ClassBalance:
    """The class x variant table of ``pairs`` (one comparison, one cell), the balance rule and the
    orientation test of its straddling pairs."""
    first = Counter(hw.get(p.run_first, UNKNOWN) for p in pairs)
    second = Counter(hw.get(p.run_second, UNKNOWN) for p in pairs)
    names = sorted(set(first) | set(second))
    table = tuple((c, first[c], second[c]) for c in names)
    oriented = Counter(
        (hw.get(p.run_first, UNKNOWN), hw.get(p.run_second, UNKNOWN))
        for p in pairs
        if hw.get(p.run_first, UNKNOWN) != hw.get(p.run_second, UNKNOWN)
    )
    p, test = math.nan, ""
    if oriented:
        test = "exact sign test on the straddling pairs" if len(names) == 2 else "exact symmetry test"
        p = orientation_test(oriented)
    balanced = all(a == b for _, a, b in table)
    return ClassBalance(comparison, size, budget, table, balanced, p, test, tuple(sorted(oriented.items())))


def _diffs_row(
    name: str | None, d: np.ndarray, *, straddling: bool = False, status: str = "tested"
) -> ClassDiffs:
    t = paired.t_test(d)
    return ClassDiffs(
        hardware=name,
        n=int(d.size),
        mean=float(t["mean"]),
        sd=float(t["sd"]),
        ci_low=float(t["ci_low"]),
        ci_high=float(t["ci_high"]),
        straddling=straddling,
        status=status,
    )


def class_check(
    comparison: str,
    kind: str,
    size: str,
    budget: int,
    pairs,
    hw: dict[str, str],
    alpha: float = 0.05,
    *,
    floor: int = MIN_CLASS_PAIRS,
    draws: int = PERMUTATIONS,
    seed: int = SEED,
) -> ClassCheck:
    """One comparison's paired differences per class, the straddling pairs apart, and the agreement test
    (:func:`~harness.report.stats.class_tests.class_agreement`) over the classes with >= ``floor`` pairs and non-zero spread,
    unless its smallest attainable p is not below ``alpha``. ``floor``, ``draws`` and ``seed``: the report's,
    unless a simulation studies others (:mod:`harness.report.simulation.provenance`). Holm p, MDE and level
    are filled in by :func:`grid_provenance` (they depend on the grid's family)."""
    by: dict[str, list[float]] = {}
    across: list[float] = []
    for p in pairs:
        a, b = hw.get(p.run_first, UNKNOWN), hw.get(p.run_second, UNKNOWN)
        (by.setdefault(a, []) if a == b else across).append(p.diff)
    names = sorted(by, key=lambda c: (-len(by[c]), c))
    rows = []
    for c in names:
        d = np.array(by[c])
        zero = d.size >= 2 and bool(paired.zero_spread(d))
        status = TOO_FEW if d.size < floor else "zero spread" if zero else "tested"
        rows.append(_diffs_row(c, d, status=status))
    if across:
        rows.append(_diffs_row(None, np.array(across), straddling=True, status="in no test"))
    tested = [r.hardware for r in rows if r.status == "tested"]
    if len(tested) < 2:
        return ClassCheck(
            comparison,
            kind,
            size,
            budget,
            _untested(rows),
            (),
            *([math.nan] * 4),
            _why_not(rows, floor),
        )
    a = class_agreement([np.array(by[c]) for c in tested], draws, seed)
    if not a.min_p < alpha:
        sizes = "/".join(str(len(by[c])) for c in tested)
        note = f"{TOO_FEW}: the smallest p {len(tested)} classes of {sizes} pairs can give is {a.min_p:.2g}"
        return ClassCheck(
            comparison, kind, size, budget, _untested(rows), (), *([math.nan] * 4), note, min_p=a.min_p
        )
    return ClassCheck(
        comparison,
        kind,
        size,
        budget,
        tuple(rows),
        tuple(tested),
        a.f,
        a.df1,
        a.df2,
        a.p,
        "",
        a.exact,
        a.min_p,
        p_permutation=a.p_permutation,
        p_spread=a.p_spread,
    )


def _untested(rows: list[ClassDiffs]) -> tuple[ClassDiffs, ...]:
    """``rows`` of a comparison whose agreement test did not run: a class that would have entered it reads
    :data:`NO_TEST_RAN`, not ``tested``."""
    return tuple(dataclasses.replace(r, status=NO_TEST_RAN) if r.status == "tested" else r for r in rows)


def _why_not(rows: list[ClassDiffs], floor: int) -> str:
    """Why fewer than two classes enter the agreement test."""
    few = sum(r.status == TOO_FEW for r in rows)
    flat = sum(r.status == "zero spread" for r in rows)
    if flat and not few:
        return f"fewer than two classes with a spread ({flat} with zero spread): no test"
    return f"{TOO_FEW}: fewer than two classes with >= {floor} pairs and a spread"


def attainable_level(level: float, min_p: float, exact: bool) -> float:
    """The largest p an exact permutation test can give at or below ``level``: its p's are multiples of
    ``min_p`` (the relabellings come in groups of equal F), so it rejects at ``floor(level / min_p) * min_p``;
    0 where even ``min_p`` exceeds ``level`` (it cannot reject there). A Monte Carlo p: ``level``."""
    if not exact:
        return level
    return math.floor(level / min_p * (1 + 1e-12)) * min_p


def _with_family(
    checks: list[ClassCheck], groups: dict, alpha: float, power: float
) -> tuple[ClassCheck, ...]:
    """The grid's agreement tests with their Holm p (over those that ran), the level of Holm's first step
    (alpha / how many ran) and each one's MDE at the largest p it can attain at that level
    (:func:`attainable_level`; infinite where it cannot reject there)."""
    ran = [i for i, c in enumerate(checks) if math.isfinite(c.p)]
    holm_p = dec.holm(np.array([checks[i].p for i in ran])) if ran else np.array([])
    level = alpha / len(ran) if ran else math.nan
    out = [_replace(c, alpha=alpha) for c in checks]
    for i, hp in zip(ran, holm_p, strict=True):
        c = checks[i]
        reach = attainable_level(level, c.min_p, c.exact)
        mde = (
            agreement_mde(
                [np.array(groups[(c.comparison, c.size, c.budget_tokens)][h]) for h in c.tested], reach, power
            )
            if reach > 0
            else math.inf
        )
        out[i] = _replace(c, holm_p=float(hp), mde_nats=mde, level=level, alpha=alpha)
    return tuple(out)


def _replace(c: ClassCheck, **changes) -> ClassCheck:
    return dataclasses.replace(c, **changes)


def _verdicts(stats: ReportStats) -> dict[tuple[str, int, str], tuple[str, int]]:
    """``(size, budget, what) -> (verdict, n)`` of every decision of a report."""
    out = {(h.size, h.budget_tokens, "headline"): (h.verdict, h.n) for h in stats.headlines}
    out |= {(a.size, a.budget_tokens, a.control): (a.verdict, a.n) for a in stats.assessments}
    out |= {(a.size, a.budget_tokens, f"A/A {a.variant}"): (a.status, a.n) for a in stats.aa_checks}
    return out


def is_definite(verdict: str) -> bool:
    """The verdict decides something (:data:`DEFINITE`, or ``gain absent``)."""
    return verdict in DEFINITE or dec.is_absent(verdict)


def within_status(verdict_all: str, verdict_within: str, n_within: int, power: float, target: float) -> str:
    """Whether a verdict holds within the largest class.

    :data:`TOO_FEW` where the class holds fewer pairs than the paired test needs
    (:data:`~harness.report.stats.paired_tests.MIN_PAIRS`): it re-decided nothing, so its verdict, the same
    words or not, is no evidence either way. Else ``yes`` (the same definite verdict); ``NO`` where the class
    reaches another definite verdict, or misses a definite pooled verdict it had the power (>= ``target``)
    to reach; :data:`NOTHING_TO_HOLD` where the pooled verdict decided nothing (an undecided verdict that stays
    undecided shows nothing); else ``not re-decidable at N pairs`` (the class decides nothing definite:
    power, not the mix, is the likelier reason)."""
    if n_within < paired.MIN_PAIRS:
        return TOO_FEW
    if is_definite(verdict_within) and verdict_all != verdict_within:
        return NO
    if not is_definite(verdict_all):
        return NOTHING_TO_HOLD
    if verdict_all == verdict_within:
        return YES
    if math.isfinite(power) and power >= target:
        return NO
    return not_redecidable(n_within)


def _power(effect: float, sd: float, n: int, level: float, alternative: str) -> float:
    """:func:`harness.report.stats.power.power_at`; NaN without a finite effect and a usable sd."""
    if not (math.isfinite(effect) and math.isfinite(sd) and sd > 0):
        return math.nan
    return float(power_at(effect, sd, n, level, alternative))


def redecision_power(
    stats: ReportStats, sub: ReportStats | None, size: str, budget: int, what: str, n: int
) -> float:
    """The power of re-deciding a definite pooled verdict (``what`` in cell ``(size, budget)``) on ``n`` pairs
    of one class: the within-class test against the pooled effect and sd (nats/token), at the level the
    within-class analysis gives it at Holm's first step (the plan's alpha over its cells or its control
    family). A control's verdict needs the headline established first: the product of the two powers
    (taken as independent). NaN where the pooled verdict is not definite or ``n`` < 3."""
    verdicts = _verdicts(stats)
    verdict = verdicts.get((size, budget, what), ("", 0))[0]
    if not is_definite(verdict) or n < paired.MIN_PAIRS:
        return math.nan
    alpha = stats.plan.alpha
    cells = max(1, len({(h.size, h.budget_tokens) for h in (sub or stats).headlines}))
    head = next((h for h in stats.headlines if (h.size, h.budget_tokens) == (size, budget)), None)

    def headline_power() -> float:
        if head is None or not math.isfinite(head.sd):
            return math.nan
        return _power(abs(head.mean), head.sd, n, alpha / cells, "one-sided")

    if what == "headline":
        if head is None or not dec.is_absent(verdict):
            return headline_power()
        gap = (
            stats.plan.min_effect_nats or math.nan
        ) + head.mean  # delta - gain: how far the gain is below it
        return _power(gap, head.sd, n, alpha / cells, "one-sided") if gap > 0 else 0.0
    if what.startswith("A/A "):
        comp = next(
            (
                c
                for c in stats.comparisons
                if c.kind == "aa_check"
                and (c.size, c.budget_tokens) == (size, budget)
                and f"A/A {c.first}" == what
            ),
            None,
        )
        if comp is None:
            return math.nan
        return _power(abs(comp.stats.mean), comp.stats.sd, n, alpha / cells, "two-sided")
    a = next(
        (a for a in stats.assessments if (a.size, a.budget_tokens, a.control) == (size, budget, what)), None
    )
    if a is None or verdict == dec.DEGENERATE:
        return math.nan
    family = max(1, a.family_size)
    contrast = _power(abs(a.contrast_mean), a.contrast_sd, n, alpha / family, "two-sided")
    return contrast * headline_power()


def within_class(
    stats: ReportStats, largest: str, decide: Callable[[str], ReportStats]
) -> tuple[tuple[ClassVerdict, ...], str]:
    """Every verdict of ``stats`` next to ``decide(largest)``'s (the same analysis on that class's runs),
    with the power of the re-decision and whether it holds (:func:`within_status`).

    A decision the subset cannot make (no parent run in the class, no pair in a cell) reads
    ``no pairs in this class``; a subset that cannot be analysed at all returns its reason.
    """
    try:
        sub_stats = decide(largest)
        sub = _verdicts(sub_stats)
    except ValueError as exc:  # e.g. no finished parent run in the class
        return (), f"the runs of {largest} alone could not be analysed: {exc}"
    rows = []
    for (size, budget, what), (verdict, _n) in _verdicts(stats).items():
        within, n = sub.get((size, budget, what), ("no pairs in this class", 0))
        power = redecision_power(stats, sub_stats, size, budget, what, n)
        status = within_status(verdict, within, n, power, stats.plan.power)
        rows.append(ClassVerdict(size, budget, what, verdict, within, n, power, status))
    rows.sort(key=lambda r: (cell_order((r.size, r.budget_tokens)), r.what != "headline", r.what))
    return tuple(rows), ""


def grid_provenance(
    stats: ReportStats,
    final: pl.DataFrame,
    runs: pl.DataFrame,
    decide: Callable[[str], ReportStats] | None = None,
) -> Provenance:
    """The provenance of one grid's report.

    Args:
        stats: the grid's report (:func:`harness.report.stats.analysis.analyze`).
        final: the frozen protocol's finished runs (``final`` rows of the grid, the ``[tuned]`` runs split off).
        runs: the grid's ``runs`` rows (``hardware`` and ``code_version`` read where present).
        decide: ``class -> ReportStats`` of the same analysis on that class's runs alone; None: no
            re-decision within the largest class.
    """
    hw = hardware_by_run(runs)
    num = numerics_by_run(runs)
    setting = settings_by_run(runs)
    unknown = (UNKNOWN, UNKNOWN)
    commit = (
        {rid: (cv or UNKNOWN) for rid, cv in runs.select("run_id", "code_version").iter_rows()}
        if "code_version" in runs.columns
        else {}
    )
    done = final.filter(pl.col("val_nll").is_not_null()).select("run_id", "variant")
    ids_of: dict[str, list[str]] = {}
    for rid, variant in done.iter_rows():
        ids_of.setdefault(variant, []).append(rid)
    variants = tuple(
        VariantProvenance(
            v,
            len(ids),
            _counts(hw.get(r, UNKNOWN) for r in ids),
            _counts(commit.get(r, UNKNOWN) for r in ids),
            _counts(num.get(r, UNKNOWN) for r in ids),
        )
        for v, ids in sorted(ids_of.items())
    )
    classes = _counts(hw.get(r, UNKNOWN) for ids in ids_of.values() for r in ids)
    numerics = _counts(num.get(r, UNKNOWN) for ids in ids_of.values() for r in ids)
    groups: dict[tuple[str, str, int], list] = {}
    for p in stats.pairs:
        groups.setdefault((p.comparison, p.size, p.budget_tokens), []).append(p)
    kinds = {(c.comparison, c.size, c.budget_tokens): c.kind for c in stats.comparisons}
    keys = [k for k in groups if kinds.get(k) in CHECKED_KINDS]
    balance = tuple(class_balance(c, s, b, groups[(c, s, b)], hw) for c, s, b in keys)
    straddling = tuple(
        StraddlingPair(
            p.comparison,
            p.size,
            p.budget_tokens,
            p.seed,
            hw.get(p.run_first, UNKNOWN),
            hw.get(p.run_second, UNKNOWN),
        )
        for k in keys
        for p in groups[k]
        if hw.get(p.run_first, UNKNOWN) != hw.get(p.run_second, UNKNOWN)
    )
    numerics_straddling = sum(
        num.get(p.run_first, UNKNOWN) != num.get(p.run_second, UNKNOWN) for k in keys for p in groups[k]
    )
    settings = _counts(settings_text(*setting.get(r, unknown)) for ids in ids_of.values() for r in ids)
    variant_of = dict(done.iter_rows())
    straddles: dict[tuple[str, str], SettingsStraddle] = {}
    for k in keys:
        for p in groups[k]:
            a, b = setting.get(p.run_first, unknown), setting.get(p.run_second, unknown)
            if a != b and (p.run_first, p.run_second) not in straddles:
                straddles[(p.run_first, p.run_second)] = SettingsStraddle(
                    p.size,
                    p.budget_tokens,
                    p.seed,
                    (
                        (variant_of.get(p.run_first, p.run_first), *a),
                        (variant_of.get(p.run_second, p.run_second), *b),
                    ),
                )
    settings_straddling = tuple(
        sorted(straddles.values(), key=lambda t: (cell_order((t.size, t.budget_tokens)), t.seed, t.runs))
    )
    alpha, power = stats.plan.alpha, stats.plan.power
    lineage = {
        "numerics": numerics,
        "numerics_straddling": numerics_straddling,
        "settings": settings,
        "settings_straddling": settings_straddling,
        "alpha": alpha,
        "power": power,
    }
    prov = Provenance(sum(n for _, n in classes), classes, variants, balance, straddling, (), **lineage)
    if not prov.mixed:
        return prov
    by_class = {
        k: _by_class(groups[k], hw) for k in keys
    }  # (comparison, size, budget) -> class -> paired differences of its one-class pairs
    checks = _with_family(
        [class_check(c, kinds[(c, s, b)], s, b, groups[(c, s, b)], hw, alpha) for c, s, b in keys],
        by_class,
        alpha,
        power,
    )
    largest = classes[0][0]
    within, note = within_class(stats, largest, decide) if decide is not None else ((), "")
    return Provenance(
        prov.runs, classes, variants, balance, straddling, checks, largest, within, note, **lineage
    )


def _by_class(pairs, hw: dict[str, str]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for p in pairs:
        a, b = hw.get(p.run_first, UNKNOWN), hw.get(p.run_second, UNKNOWN)
        if a == b:
            out.setdefault(a, []).append(p.diff)
    return out


__all__ = [
    "CHECKED_KINDS",
    "MIN_CLASS_PAIRS",
    "NOTHING_TO_HOLD",
    "NO_TEST_RAN",
    "TOO_FEW",
    "ClassBalance",
    "ClassCheck",
    "ClassDiffs",
    "ClassVerdict",
    "Provenance",
    "SettingsStraddle",
    "StraddlingPair",
    "VariantProvenance",
    "attainable_level",
    "class_balance",
    "class_check",
    "grid_provenance",
    "hardware_by_run",
    "is_definite",
    "not_redecidable",
    "redecision_power",
    "numerics_by_run",
    "settings_by_run",
    "settings_text",
    "within_class",
    "within_status",
]
