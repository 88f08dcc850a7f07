"""Where a grid's runs ran (DESIGN section 13): hardware classes, training commits, and the
variant x hardware check of a grid that mixes classes.

A run's *hardware class* is ``runs.hardware`` (a short key of what changes numerics: device model,
precision, torch version, compile). Runs written before it was recorded read as :data:`UNKNOWN`
(NULL or empty too), never a guess. Floats are bit-identical on one machine only, so a pair whose
two runs ran on different classes (*straddling*) carries the difference between the machines in its
paired difference, and a comparison whose two variants sit on the classes in different shares
(*imbalanced*) lets a class effect bias its mean.

A run's *numerics* is the training code's numerics identifier (``runs.numerics``: ``two_phase/2``,
``per_site/1``; code that re-rounds a run is provenance too, :mod:`harness.models.numerics`). A run written
before it was recorded reads as its training commit implies where that is known
(:func:`harness.models.numerics.implied_numerics`), else :data:`UNKNOWN`.

Computed here, per grid (the frozen protocol's finished runs; the ``[tuned]`` runs are left out):

* per variant: its classes, numerics and commits (``runs.code_version``, ``-dirty`` kept) with run counts;
  over the grid, its numerics and the pairs whose two runs trained with different numerics;
* per comparison and cell: the class x variant table of its paired runs and the balance rule:
  **balanced** when every class holds as many of the first variant's paired runs as of the
  second's (equal class shares within the pairs, so a class's offset cancels in the mean paired
  difference); beside it, as the strength of an imbalance, the two-sided p of Fisher's exact test on
  the table (two classes) or of the chi-square test of independence (more classes; Pearson, without
  continuity correction);
* the straddling pairs;
* with several classes, per comparison and cell, the paired differences of the pairs whose two runs
  share a class, per class (n, mean, 95 % t interval), the straddling pairs as a row of their own,
  and Welch's heteroscedastic one-way ANOVA (Welch 1951) that the classes' mean paired differences
  agree, over the classes with at least two pairs and non-zero spread (the straddling row is
  descriptive, in no test);
* with several classes, every verdict re-decided on the runs of the largest class alone (the most
  finished runs; a tie goes to the first name in sort order): descriptive, in no family; the
  re-analysis itself is the report's own (:func:`harness.report.build.compute_stats` passes it in).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import polars as pl
import scipy.stats

from harness.models.numerics import run_numerics_of
from harness.report.stats import paired_tests as paired
from harness.report.stats.pairing import cell_order
from harness.report.stats.results import ReportStats

UNKNOWN = "unknown"  # the class of a run written before the hardware record existed
STRADDLING = "straddling"  # the per-class row of the pairs whose two runs ran on different classes
CHECKED_KINDS = (
    "treatment_vs_parent",
    "control_vs_parent",
    "aa_check",
    "treatment_vs_control",
    "parent_vs_reference",
)  # the frozen protocol's comparisons (not the [tuned] row, not the factorial contrasts)


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
    class. ``p``: two-sided p of Fisher's exact test (two classes) or the chi-square test of independence
    (more; ``test`` names it); NaN with one class.
    """

    comparison: str
    size: str
    budget_tokens: int
    table: tuple[tuple[str, int, int], ...]
    balanced: bool
    p: float
    test: str


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
class ClassDiffs:
    """The paired differences (nats/token) of one class (or :data:`STRADDLING`): n, mean, sd and the
    95 % t interval (NaN below 3 pairs or at zero spread)."""

    hardware: str
    n: int
    mean: float
    sd: float
    ci_low: float
    ci_high: float


@dataclass(frozen=True, slots=True)
class ClassCheck:
    """One comparison in one cell with its pairs split by class.

    ``f``, ``df1``, ``df2``, ``p``: Welch's ANOVA of H0 "every class's mean paired difference is the
    same" over ``tested`` (classes with >= 2 pairs and non-zero spread); NaN with fewer than two such
    classes (``note`` says why).
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


@dataclass(frozen=True, slots=True)
class ClassVerdict:
    """A verdict of the whole grid next to the same decision on the largest class's runs alone."""

    size: str
    budget_tokens: int
    what: str  # "headline", a control's name or "A/A <variant>"
    verdict_all: str
    verdict_within: str
    n_within: int

    @property
    def holds(self) -> bool:
        return self.verdict_all == self.verdict_within


@dataclass(frozen=True, slots=True)
class Provenance:
    """Where one grid's finished runs ran (see the module docstring).

    ``classes``: ``(class, runs)`` over the grid, most first. ``largest``: the largest class where the
    grid mixes classes, else None. ``within``: every verdict re-decided within it; ``within_note``: why
    that could not be done, if so. ``numerics``: ``(numerics, runs)`` over the grid, most first;
    ``numerics_straddling``: the pairs (of the checked comparisons) whose two runs differ in numerics.
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
    numerics: tuple[tuple[str, int], ...] = ()
    numerics_straddling: int = 0

    @property
    def mixed(self) -> bool:
        return len(self.classes) > 1

    @property
    def numerics_mixed(self) -> bool:
        return len(self.numerics) > 1

    @property
    def all_unknown(self) -> bool:
        return [c for c, _ in self.classes] == [UNKNOWN]

    @property
    def imbalanced(self) -> tuple[ClassBalance, ...]:
        return tuple(b for b in self.balance if not b.balanced)


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


def _counts(values) -> tuple[tuple[str, int], ...]:
    """``(value, count)``, most first, then by name."""
    return tuple(sorted(Counter(values).items(), key=lambda kv: (-kv[1], kv[0])))


def welch_anova(groups: list[np.ndarray]) -> tuple[float, float, float, float]:
    """Welch's heteroscedastic one-way ANOVA (Welch 1951, Biometrika 38: 330-336).

    H0: the groups' means are equal, variances free. ``w_i = n_i / s_i^2``,
    ``F = [sum w_i (m_i - m_w)^2 / (k - 1)] / [1 + 2 (k - 2) / (k^2 - 1) * L]``, with
    ``L = sum (1 - w_i / W)^2 / (n_i - 1)``, on ``(k - 1, (k^2 - 1) / (3 L))`` degrees of freedom.
    With two groups it is Welch's t-test (F = t^2).

    Args:
        groups: k >= 2 one-dimensional arrays, each with n >= 2 and non-zero variance.

    Returns:
        ``(F, df1, df2, p)``, p the upper tail of F.

    Raises:
        ValueError: fewer than two groups, a group with fewer than two values or zero variance.
    """
    if len(groups) < 2:
        raise ValueError(f"Welch's ANOVA needs at least 2 groups, got {len(groups)}")
    n = np.array([g.size for g in groups], float)
    if (n < 2).any():
        raise ValueError(
            f"Welch's ANOVA needs at least 2 values per group, got sizes {n.astype(int).tolist()}"
        )
    var = np.array([g.var(ddof=1) for g in groups])
    if (var <= 0).any():
        raise ValueError("Welch's ANOVA needs a non-zero variance in every group")
    k = len(groups)
    w = n / var
    means = np.array([g.mean() for g in groups])
    m_w = float((w * means).sum() / w.sum())
    lam = float(((1 - w / w.sum()) ** 2 / (n - 1)).sum())
    f = float((w * (means - m_w) ** 2).sum() / (k - 1)) / (1 + 2 * (k - 2) / (k * k - 1) * lam)
    df1, df2 = float(k - 1), float((k * k - 1) / (3 * lam))
    return f, df1, df2, float(scipy.stats.f.sf(f, df1, df2))


def class_balance(comparison: str, size: str, budget: int, pairs, hw: dict[str, str]) -> ClassBalance:
    """The class x variant table of ``pairs`` (one comparison, one cell) and the balance rule."""
    first = Counter(hw.get(p.run_first, UNKNOWN) for p in pairs)
    second = Counter(hw.get(p.run_second, UNKNOWN) for p in pairs)
    names = sorted(set(first) | set(second))
    table = tuple((c, first[c], second[c]) for c in names)
    p, test = math.nan, ""
    if len(names) == 2:
        test = "Fisher's exact"
        p = float(scipy.stats.fisher_exact([[r[1] for r in table], [r[2] for r in table]]).pvalue)
    elif len(names) > 2:
        test = "chi-square"
        counts = [[r[1] for r in table], [r[2] for r in table]]
        p = float(scipy.stats.chi2_contingency(counts, correction=False).pvalue)
    balanced = all(a == b for _, a, b in table)
    return ClassBalance(comparison, size, budget, table, balanced, p, test)


def _diffs_row(name: str, d: np.ndarray) -> ClassDiffs:
    t = paired.t_test(d)
    return ClassDiffs(
        hardware=name,
        n=int(d.size),
        mean=float(t["mean"]),
        sd=float(t["sd"]),
        ci_low=float(t["ci_low"]),
        ci_high=float(t["ci_high"]),
    )


def class_check(comparison: str, kind: str, size: str, budget: int, pairs, hw: dict[str, str]) -> ClassCheck:
    """One comparison's paired differences per class, the straddling pairs apart, and Welch's ANOVA."""
    by: dict[str, list[float]] = {}
    for p in pairs:
        a, b = hw.get(p.run_first, UNKNOWN), hw.get(p.run_second, UNKNOWN)
        by.setdefault(a if a == b else STRADDLING, []).append(p.diff)
    names = sorted((c for c in by if c != STRADDLING), key=lambda c: (-len(by[c]), c))
    rows = [_diffs_row(c, np.array(by[c])) for c in names]
    if STRADDLING in by:
        rows.append(_diffs_row(STRADDLING, np.array(by[STRADDLING])))
    tested = [r.hardware for r in rows if r.hardware != STRADDLING and r.n >= 2 and r.sd > 0]
    f = df1 = df2 = p = math.nan
    if len(tested) >= 2:
        f, df1, df2, p = welch_anova([np.array(by[c]) for c in tested])
        note = ""
    else:
        note = "fewer than two classes with >= 2 pairs and non-zero spread: no test"
    return ClassCheck(comparison, kind, size, budget, tuple(rows), tuple(tested), f, df1, df2, p, note)


def _verdicts(stats: ReportStats) -> dict[tuple[str, int, str], tuple[str, int]]:
    """``(size, budget, what) -> (verdict, n)`` of every decision of a report."""
    out = {(h.size, h.budget_tokens, "headline"): (h.verdict, h.n) for h in stats.headlines}
    out |= {(a.size, a.budget_tokens, a.control): (a.verdict, a.n) for a in stats.assessments}
    out |= {(a.size, a.budget_tokens, f"A/A {a.variant}"): (a.status, a.n) for a in stats.aa_checks}
    return out


def within_class(
    stats: ReportStats, largest: str, decide: Callable[[str], ReportStats]
) -> tuple[tuple[ClassVerdict, ...], str]:
    """Every verdict of ``stats`` next to ``decide(largest)``'s (the same analysis on that class's runs).

    A decision the subset cannot make (no parent run in the class, no pair in a cell) reads
    ``no pairs in this class``; a subset that cannot be analysed at all returns its reason.
    """
    try:
        sub = _verdicts(decide(largest))
    except ValueError as exc:  # e.g. no finished parent run in the class
        return (), f"the runs of {largest} alone could not be analysed: {exc}"
    rows = [
        ClassVerdict(
            size, budget, what, verdict, *sub.get((size, budget, what), ("no pairs in this class", 0))
        )
        for (size, budget, what), (verdict, _n) in _verdicts(stats).items()
    ]
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
    lineage = {"numerics": numerics, "numerics_straddling": numerics_straddling}
    prov = Provenance(sum(n for _, n in classes), classes, variants, balance, straddling, (), **lineage)
    if not prov.mixed:
        return prov
    checks = tuple(class_check(c, kinds[(c, s, b)], s, b, groups[(c, s, b)], hw) for c, s, b in keys)
    largest = classes[0][0]
    within, note = within_class(stats, largest, decide) if decide is not None else ((), "")
    return Provenance(
        prov.runs, classes, variants, balance, straddling, checks, largest, within, note, **lineage
    )


__all__ = [
    "CHECKED_KINDS",
    "STRADDLING",
    "UNKNOWN",
    "ClassBalance",
    "ClassCheck",
    "ClassDiffs",
    "ClassVerdict",
    "Provenance",
    "StraddlingPair",
    "VariantProvenance",
    "class_balance",
    "class_check",
    "grid_provenance",
    "hardware_by_run",
    "numerics_by_run",
    "welch_anova",
    "within_class",
]
