"""``stats.csv``: its column contract and one row per comparison and per factorial contrast.

:meth:`harness.report.stats.results.ReportStats.to_frame` calls :func:`stats_frame`. A row holds a
comparison's descriptives (:class:`~harness.report.stats.results.Comparison`) and, where the comparison
carries a verdict, that verdict's columns: the headline (Step 1), a control's contrast (Step 2),
the A/A check, the ``[tuned]`` robustness row or a factorial contrast (DESIGN 12). The columns of
DESIGN section 6 are :data:`CSV_COLUMNS` (add, never rename), then :data:`EXTRA_COLUMNS`. Notes
are short fixed tags (``NOTE_*``), joined by "; " in the ``note`` column.

This module reads the result objects by their fields and imports none of them (they import it).
"""

from __future__ import annotations

import json
import math

import polars as pl

from harness.design.analysis_plan import AnalysisPlan
from harness.report.stats import paired_tests as paired
from harness.report.stats.floors import FLOOR_NATS
from harness.report.stats.looks import Look
from harness.report.stats.power import SeedsNeeded

NAN = math.nan


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
    "loo_max_holm_p",
    "loo_worst_seed",
    "loo_survives",
    "hardware_classes",
    "hardware_balanced",
    "straddling_pairs",
    "hardware_agree_p",
    "hardware_agree_holm_p",
    "hardware_agree_mde_nats",
    "hardware_agree_note",
    "hardware_balance_p",
)


# Short fixed note tags (stats.csv `note`; harness.report.render.sections words them).
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


NOTE_IMPUTED = "seed(s) {seeds} count as losses (diverged: d = {values}, worst-case imputation)"


NOTE_DROPPED = "seed(s) {seeds} left out: both sides (or the parent) diverged"


NOTE_TEST_SEEDS = "the verdict uses {n} pair(s), seeds {seeds}"

# The columns a verdict fills, as a row without one holds them (the descriptive rows).
VERDICT_DEFAULTS = dict(
    p_one_sided=NAN,
    holm_p=NAN,
    contrast_mean=NAN,
    contrast_p=NAN,
    gain_fraction=NAN,
    gain_fraction_low=NAN,
    gain_fraction_high=NAN,
    verdict="",
    mde_nats=NAN,
    seeds_needed=None,
    reason="",
    p_one_sided_test="",
    family_size=None,
    contrast_n=None,
    contrast_sd=NAN,
    contrast_test="",
    gain_fraction_bounded=None,
    planned_effect_nats=NAN,
    power_at_max_seeds=NAN,
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
    loo_max_holm_p=NAN,
    loo_worst_seed=None,
    loo_survives=None,
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


def _influence_columns(i) -> dict:
    """An established verdict's leave-one-seed-out columns (:mod:`harness.report.stats.leave_one_out`;
    descriptive): the largest Holm p without one seed, that seed, and whether the verdict held each time."""
    if i is None:
        return {}
    return {"loo_max_holm_p": i.max_holm_p, "loo_worst_seed": i.worst_seed, "loo_survives": i.survives}


def comparison_row(rs, c) -> dict:
    """The ``stats.csv`` row of comparison ``c`` (a :class:`~harness.report.stats.results.Comparison` of the
    :class:`~harness.report.stats.results.ReportStats` ``rs``): its descriptives, then the columns of the
    verdict it carries (headline, control, A/A check or robustness row), empty where it carries none."""
    s = c.stats
    notes = [NOTE_FEW] if s.n < paired.MIN_PAIRS else []
    if s.zero_spread and s.n >= paired.MIN_PAIRS:
        notes.append(NOTE_ZERO_SPREAD)
    if s.ties and s.n_nonzero:
        notes.append(NOTE_ZEROS.format(k=s.ties))
    if c.missing:
        notes.append(NOTE_LOST.format(seeds=", ".join(map(str, c.lost_seeds))))
    row = {**_descriptive_columns(c), **VERDICT_DEFAULTS}
    h = rs.headline(c.size, c.budget_tokens) if c.kind == "treatment_vs_parent" else None
    a = rs.assessment(c.first, c.size, c.budget_tokens) if c.kind == "control_vs_parent" else None
    aa = rs.aa_check(c.first, c.size, c.budget_tokens) if c.kind == "aa_check" else None
    if h is not None:
        notes += _headline_columns(row, h, c, rs.plan)
        row.update(_influence_columns(rs.seed_influence("headline", c.comparison, c.size, c.budget_tokens)))
    elif a is not None:
        notes += _control_columns(row, a, c)
        row.update(_influence_columns(rs.seed_influence("control", c.comparison, c.size, c.budget_tokens)))
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


def _descriptive_columns(c) -> dict:
    """The columns of a comparison's descriptives (:class:`~harness.report.stats.results.Descriptives`), reported
    for every comparison, with or without a verdict."""
    s = c.stats
    return dict(
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
        perm_p=s.perm_p,
        wilcoxon_p=s.wilcoxon_p,
        sign_p=s.sign_p,
        first=c.first,
        second=c.second,
        t_stat=s.t_stat,
        df=s.n - 1 if s.n >= paired.MIN_PAIRS else None,
        n_nonzero=s.n_nonzero,
        perm_min_p=s.min_p,
        wilcoxon_stat=s.wilcoxon_stat,
        wilcoxon_min_p=s.min_p,
        sign_min_p=s.min_p,
        missing_seeds="; ".join(c.missing),
        code_versions=" ".join(c.code_versions),
    )


def _headline_columns(row: dict, h, c, plan: AnalysisPlan) -> list[str]:
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


def _control_columns(row: dict, a, c) -> list[str]:
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


def factorial_row(rs, f) -> dict:
    """The ``stats.csv`` row of one factorial contrast (:class:`harness.report.stats.factorial.FactorialContrast`):
    descriptives of its observed seeds, then its test, Holm p over the factorial family and verdict."""
    row = comparison_row(rs, f.comparison)
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
    row.update(
        _influence_columns(
            rs.seed_influence(
                "factorial", f.comparison.comparison, f.comparison.size, f.comparison.budget_tokens
            )
        )
    )
    notes = [row["note"]] if row["note"] else []
    notes += _tested_notes(f.comparison.seeds, f.seeds, f.imputed, f.dropped)
    if tested:
        row.update(_look_columns(f.look, f.look.level, f.sequential_p))
        notes += _look_notes(f.look, f.decided_look if f.established else 0)
    row["note"] = "; ".join(notes + _needed_notes(f.seeds_needed, rs.plan.min_effect_nats))
    return row


def stats_frame(rs) -> pl.DataFrame:
    """``stats.csv`` of a :class:`~harness.report.stats.results.ReportStats` ``rs``: one row per comparison, then
    one per factorial contrast (kinds ``factorial_*``); :data:`CSV_COLUMNS` then :data:`EXTRA_COLUMNS`."""
    rows = [comparison_row(rs, c) | _hardware_columns(rs, c) for c in rs.comparisons]
    rows += [
        factorial_row(rs, f) | _hardware_columns(rs, None) for cell in rs.factorial for f in cell.contrasts
    ]
    cols = CSV_COLUMNS + EXTRA_COLUMNS
    return pl.DataFrame(rows).select(cols) if rows else pl.DataFrame({c: [] for c in cols})


def _hardware_columns(rs, c) -> dict:
    """Where comparison ``c``'s pairs ran (DESIGN 13, :mod:`harness.report.stats.provenance`): ``hardware_classes``
    a JSON object ``{"class": [runs of first, runs of second], ...}`` (any class name, ": " and "; " included,
    reads back unambiguously), ``hardware_balanced`` (equal counts in every class), ``straddling_pairs`` (pairs
    on two classes), ``hardware_balance_p`` (the exact orientation test of the straddling pairs; NaN without
    one), ``hardware_agree_p`` / ``hardware_agree_holm_p`` (the classes' agreement test by permutation and its
    Holm p across the grid's agreement tests; NaN with one class or where no test ran),
    ``hardware_agree_mde_nats`` (its MDE) and ``hardware_agree_note`` (why no test ran, e.g. "too few pairs to
    tell: ..."). Empty for a row without provenance (factorial contrasts, the [tuned] row)."""
    empty = dict(
        hardware_classes=None,
        hardware_balanced=None,
        straddling_pairs=None,
        hardware_agree_p=NAN,
        hardware_agree_holm_p=NAN,
        hardware_agree_mde_nats=NAN,
        hardware_agree_note=None,
        hardware_balance_p=NAN,
    )
    prov = getattr(rs, "provenance", None)
    if prov is None or c is None:
        return empty
    key = (c.comparison, c.size, c.budget_tokens)
    bal = next((b for b in prov.balance if (b.comparison, b.size, b.budget_tokens) == key), None)
    if bal is None:
        return empty
    check = next((k for k in prov.checks if (k.comparison, k.size, k.budget_tokens) == key), None)
    return dict(
        hardware_classes=json.dumps({h: [a, b] for h, a, b in bal.table}),
        hardware_balanced=bal.balanced,
        straddling_pairs=sum((s.comparison, s.size, s.budget_tokens) == key for s in prov.straddling),
        hardware_agree_p=check.p if check is not None else NAN,
        hardware_agree_holm_p=check.holm_p if check is not None else NAN,
        hardware_agree_mde_nats=check.mde_nats if check is not None else NAN,
        hardware_agree_note=(check.note or None) if check is not None else None,
        hardware_balance_p=bal.p,
    )
