"""The report's provenance (DESIGN section 13), computed by :mod:`harness.report.stats.provenance`: where the runs
ran and with which code (commits and numerics), the one-line banners at the top of a grid that mixes hardware
classes or numerics, and its variant x hardware check. It prints hardware class keys, numerics identifiers and
commits only: never a host name or a path.
"""

from __future__ import annotations

import math

from harness.report.render.blocks import Block, Heading, Para, Table
from harness.report.render.fmt import fmt_p
from harness.report.render.sentences import cell_label, mean_ci
from harness.report.stats.provenance import UNKNOWN, Provenance
from harness.report.stats.results import ReportStats


def _classes_text(classes: tuple[tuple[str, int], ...]) -> str:
    return ", ".join(f"{c} ({n})" for c, n in classes)


def hardware_line(stats: ReportStats) -> str:
    """The grid's hardware in one line: one class, runs that predate the record, or the mix."""
    prov: Provenance | None = stats.provenance
    if prov is None or not prov.runs:
        return "Hardware: no finished run yet."
    if prov.all_unknown:
        return (
            f"Hardware: unknown. All {prov.runs} finished runs predate the hardware record (class "
            f"'{UNKNOWN}'): where they ran is not known."
        )
    if not prov.mixed:
        return f"Hardware: one class, all {prov.runs} finished runs on {prov.classes[0][0]}."
    imbalanced = len({(b.comparison, b.size, b.budget_tokens) for b in prov.imbalanced})
    old = f" ('{UNKNOWN}': written before the hardware record)" if UNKNOWN in dict(prov.classes) else ""
    return (
        f"Hardware: MIXED. The {prov.runs} finished runs ran on {len(prov.classes)} hardware classes "
        f"({_classes_text(prov.classes)}){old}; {len(prov.straddling)} pair(s) straddle two classes and "
        f"{imbalanced} comparison(s) are imbalanced across classes. Each class's paired differences and every "
        f"verdict within the largest class ({prov.largest}) are in the Provenance section: nothing is pooled "
        "unseen."
    )


def numerics_line(prov: Provenance) -> str:
    """The grid's numerics (the training code's numerics revisions, harness/models/numerics.py) in one line."""
    how = (
        "read from each result file, else implied by the run's training commit where known "
        "(harness/models/numerics.py)"
    )
    if [n for n, _ in prov.numerics] == [UNKNOWN]:
        return (
            f"Numerics: unknown. All {prov.runs} finished runs predate the numerics record and no training "
            "commit of theirs is known to imply one (harness/models/numerics.py)."
        )
    if len(prov.numerics) == 1:
        return f"Numerics: one, all {prov.runs} finished runs trained with {prov.numerics[0][0]} ({how})."
    return (
        f"Numerics: MIXED. The {prov.runs} finished runs trained with {len(prov.numerics)} numerics "
        f"({_classes_text(prov.numerics)}; {how}); {prov.numerics_straddling} pair(s) straddle two numerics: "
        "their paired differences carry a code change, as a pair straddling two hardware classes carries the machines'."
    )


def banner(stats: ReportStats) -> list[Block]:
    """The lines at the top of a report whose runs mix hardware classes or numerics (nothing otherwise)."""
    prov = stats.provenance
    if prov is None:
        return []
    out = [Para(hardware_line(stats), "warn")] if prov.mixed else []
    if prov.numerics_mixed:
        out.append(Para(numerics_line(prov), "warn"))
    return out


def blocks(stats: ReportStats) -> list[Block]:
    """The provenance section: the one line, per variant its classes and commits; with several classes
    the balance, the straddling pairs, the variant x hardware check and the verdicts within the largest
    class."""
    prov: Provenance | None = stats.provenance
    if prov is None:
        return []
    out: list[Block] = [
        Heading(2, "Provenance: where the runs ran"),
        Para(hardware_line(stats), "warn" if prov.mixed else ""),
        *([Para(numerics_line(prov), "warn" if prov.numerics_mixed else "")] if prov.numerics else []),
        Table(
            (
                "variant",
                "finished runs",
                "hardware classes (runs)",
                "numerics (runs)",
                "training commits (runs)",
            ),
            tuple(
                (
                    v.variant,
                    str(v.runs),
                    _classes_text(v.classes),
                    _classes_text(v.numerics),
                    _classes_text(v.commits),
                )
                for v in prov.variants
            ),
        ),
    ]
    if not prov.mixed:
        return out
    return out + _balance(prov) + _straddling(prov) + _checks(prov) + _within(prov)


def _balance(prov: Provenance) -> list[Block]:
    rows = tuple(
        (
            b.comparison,
            cell_label(b.size, b.budget_tokens),
            "; ".join(f"{c}: {n1} vs {n2}" for c, n1, n2 in b.table),
            "yes" if b.balanced else "NO",
            f"{fmt_p(b.p)} ({b.test})" if b.test else "-",
        )
        for b in prov.balance
    )
    return [
        Heading(3, "Hardware balance per comparison"),
        Para(
            "Runs of the first vs the second variant per class, over the comparison's pairs. Balanced: every class "
            "holds as many runs of each side (a class's offset then cancels in the mean paired difference). The p "
            "(Fisher's exact test on the class x variant table, chi-square with more than two classes) says how "
            "far from chance an imbalance is.",
            "note",
        ),
        Table(("comparison", "cell", "runs per class (first vs second)", "balanced", "p"), rows),
    ]


def _straddling(prov: Provenance) -> list[Block]:
    if not prov.straddling:
        return [Para("No pair straddles two classes: both runs of every pair ran on one class.", "note")]
    rows = tuple(
        (s.comparison, cell_label(s.size, s.budget_tokens), str(s.seed), s.class_first, s.class_second)
        for s in prov.straddling
    )
    return [
        Heading(3, "Pairs whose two runs ran on different classes"),
        Table(("comparison", "cell", "seed", "class of first", "class of second"), rows),
    ]


def _checks(prov: Provenance) -> list[Block]:
    rows = []
    for c in prov.checks:
        test = f"F({c.df1:.3g}, {c.df2:.3g}) = {c.f:.3g}, p {fmt_p(c.p)}" if not math.isnan(c.p) else c.note
        for i, r in enumerate(c.rows):
            rows.append(
                (
                    c.comparison if i == 0 else "",
                    cell_label(c.size, c.budget_tokens) if i == 0 else "",
                    r.hardware,
                    str(r.n),
                    mean_ci(r.mean, r.ci_low, r.ci_high),
                    test if i == 0 else "",
                )
            )
    return [
        Heading(3, "Variant x hardware: paired differences per class"),
        Para(
            "Each class's pairs (both runs on that class) side by side; the pairs that straddle two classes in a row "
            "of their own. Agreement: Welch's one-way ANOVA (unequal variances, Welch 1951) of H0 'the classes' "
            "mean paired differences are equal', over the classes with at least 2 pairs and non-zero spread; the "
            "straddling row enters no test. A small p says the hardware moved this comparison.",
            "note",
        ),
        Table(
            ("comparison", "cell", "hardware class", "n", "mean dNLL [95 % CI]", "classes agree?"),
            tuple(rows),
        ),
    ]


def _within(prov: Provenance) -> list[Block]:
    head = [
        Heading(3, f"Every verdict within the largest class ({prov.largest})"),
        Para(
            "The same decisions (plan, families, floors) re-run on the largest class's runs alone. Descriptive: "
            "in no family, it changes no verdict above; a verdict that does not hold here rests on the mix.",
            "note",
        ),
    ]
    if prov.within_note:
        return head + [Para(prov.within_note, "warn")]
    rows = tuple(
        (
            cell_label(r.size, r.budget_tokens),
            r.what,
            r.verdict_all,
            r.verdict_within,
            str(r.n_within),
            "yes" if r.holds else "NO",
        )
        for r in prov.within
    )
    held = sum(r.holds for r in prov.within)
    return head + [
        Table(("cell", "decision", "all runs", f"{prov.largest} only", "n in class", "holds"), rows),
        Para(
            f"{held} of {len(prov.within)} verdict(s) hold within {prov.largest}.",
            "" if held == len(rows) else "warn",
        ),
    ]


__all__ = ["banner", "blocks", "hardware_line", "numerics_line"]
