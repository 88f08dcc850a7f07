"""The report's provenance (DESIGN section 13), computed by :mod:`harness.report.stats.provenance`: where the runs
ran and with which code (commits and numerics), the one-line banners at the top of a grid that mixes hardware
classes or numerics, and its variant x hardware check. It prints hardware class keys, numerics identifiers and
commits only: never a host name or a path.

What the tests find comes first and in words: a detected disagreement opens the banner, before any count;
where no test detects one, the line says what the tests could have detected (their MDEs) and which
comparisons had too few pairs per class to tell; silence never reads as agreement. A class name only ever
fills a "hardware class" cell: the straddling pairs are a row kind of their own ("pairs" column).
"""

from __future__ import annotations

import math

from harness.common.terms import UNKNOWN
from harness.report.render.blocks import Block, Heading, Para, Table
from harness.report.render.fmt import fmt_nats, fmt_p
from harness.report.render.sentences import cell_label, mean_ci
from harness.report.stats.paired_tests import MIN_PAIRS
from harness.report.stats.provenance import (
    MIN_CLASS_PAIRS,
    NO,
    NO_TEST_RAN,
    NOTHING_TO_HOLD,
    TOO_FEW,
    YES,
    ClassCheck,
    Provenance,
)
from harness.report.stats.results import ReportStats


def _classes_text(classes: tuple[tuple[str, int], ...]) -> str:
    return ", ".join(f"{c} ({n})" for c, n in classes)


def _disagreement(c: ClassCheck) -> str:
    means = ", ".join(f"{r.hardware} {fmt_nats(r.mean)}" for r in c.rows if r.hardware in c.tested)
    return (
        f"{c.comparison} ({cell_label(c.size, c.budget_tokens)}): p {fmt_p(c.p)}, Holm p {fmt_p(c.holm_p)} "
        f"(mean paired difference per class: {means} nats/token)"
    )


def _mdes(prov: Provenance) -> str:
    values = [c.mde_nats for c in prov.checks if math.isfinite(c.mde_nats)]
    if not values:
        return ""
    lo, hi = f"{min(values):.4f}", f"{max(values):.4f}"
    return lo if lo == hi else f"{lo} to {hi}"


def _unreachable(checks: list[ClassCheck]) -> list[str]:
    """Per distinct class sizes, the comparisons whose classes have enough pairs each but a smallest p not
    below alpha (:attr:`ClassCheck.unreachable`), in words: "2 comparison(s) have classes whose 3/3 pairs
    cannot reach p < 0.05 (smallest p 0.1)"."""
    groups: dict[str, int] = {}
    for c in checks:
        sizes = "/".join(str(r.n) for r in c.rows if r.status == NO_TEST_RAN)
        why = f"classes whose {sizes} pairs cannot reach p < {c.alpha:g} (smallest p {c.min_p:.2g})"
        groups[why] = groups.get(why, 0) + 1
    return [f"{k} comparison(s) have {why}" for why, k in groups.items()]


def _agreement_text(prov: Provenance) -> str:
    """What the agreement tests found, when none detected a disagreement, and why each one that did not run
    did not: fewer than two classes with enough pairs and a spread, or classes with enough pairs each whose
    sizes cannot give a p below alpha (never the first reason for the second)."""
    ran = [c for c in prov.checks if math.isfinite(c.p)]
    unreachable = [c for c in prov.checks if c.unreachable]
    few = [c for c in prov.checks if c.note.startswith(TOO_FEW) and not c.unreachable]
    flat = [c for c in prov.checks if not math.isfinite(c.p) and not c.note.startswith(TOO_FEW)]
    spread = f"{len(flat)} comparison(s) have fewer than two classes with a spread" if flat else ""
    if not ran:
        if not unreachable and not flat:
            return (
                f"No comparison has two classes with >= {MIN_CLASS_PAIRS} pairs to test whether they agree: too "
                "few pairs to tell whether the hardware moved any comparison."
            )
        parts = [
            f"{len(few)} comparison(s) have fewer than two classes with >= {MIN_CLASS_PAIRS} pairs and a spread"
        ]
        parts = (parts if few else []) + _unreachable(unreachable) + ([spread] if spread else [])
        tail = (
            "too few pairs to tell whether the hardware moved any comparison"
            if few or unreachable
            else "no test tells whether the hardware moved any comparison"
        )
        return f"No agreement test ran: {'; '.join(parts)}: {tail}."
    blind = sum(not math.isfinite(c.mde_nats) for c in ran)
    seen = (
        f"a shift of one class smaller than its test's MDE ({_mdes(prov)} nats/token) can go unseen"
        if _mdes(prov)
        else "no test can reject at Holm's level"
    )
    text = (
        f"No comparison's classes are shown to disagree ({len(ran)} tested, smallest Holm p "
        f"{fmt_p(min(c.holm_p for c in ran))}); {seen}"
    )
    if blind and _mdes(prov):
        text += f" ({blind} test(s) cannot reject at Holm's level at all)"
    if few:
        text += f"; {len(few)} comparison(s) have too few pairs per class to tell"
    for part in _unreachable(unreachable):
        text += f"; {part} ({TOO_FEW})"
    if spread:
        text += f"; {spread}"
    return text + "."


def _largest(prov: Provenance) -> str:
    """The class every verdict is re-decided within, in words: "the largest class (A)", or where classes tie
    for the most finished runs "A (tied with B, C at 3 finished runs each; the first by name)", never calling
    one of tied classes the largest."""
    if not prov.tied:
        return f"the largest class ({prov.largest})"
    runs = dict(prov.classes)[prov.largest]
    return (
        f"{prov.largest} (tied with {', '.join(prov.tied)} at {runs} finished runs each; the first by name)"
    )


def hardware_line(stats: ReportStats) -> str:
    """The grid's hardware in one line: one class, runs that predate the record, or the mix, with what the
    agreement tests found first."""
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
    found = prov.disagreements
    head = (
        "Hardware: MIXED, and the classes disagree on "
        + "; on ".join(_disagreement(c) for c in found)
        + ": the hardware moved these comparisons; their pooled verdicts mix the classes. "
        if found
        else "Hardware: MIXED. "
    )
    imbalanced = len({(b.comparison, b.size, b.budget_tokens) for b in prov.imbalanced})
    old = f" ('{UNKNOWN}': written before the hardware record)" if UNKNOWN in dict(prov.classes) else ""
    return (
        f"{head}The {prov.runs} finished runs ran on {len(prov.classes)} hardware classes "
        f"({_classes_text(prov.classes)}){old}; {len(prov.straddling)} pair(s) straddle two classes and "
        f"{imbalanced} comparison(s) are imbalanced across classes. "
        + ("" if found else _agreement_text(prov) + " ")
        + f"Each class's paired differences and every verdict within {_largest(prov)} are in "
        "the Provenance section."
    )


def numerics_line(prov: Provenance) -> str:
    """The grid's numerics (the training code's numerics revisions, harness/models/numerics.py) in one line."""
    how = (
        "read from each result file, else implied by the run's training commit where known "
        "(harness/models/numerics.py)"
    )
    if [n for n, _ in prov.numerics] == [UNKNOWN]:
        unknown = (
            f"Numerics: unknown. All {prov.runs} finished runs predate the numerics record and no training "
            "commit of theirs is known to imply one (harness/models/numerics.py)."
        )
        return settings_line(prov, unknown[:-1] + "; they trained ") if prov.settings_mixed else unknown
    if not prov.numerics_mixed:
        return f"Numerics: one, all {prov.runs} finished runs trained with {prov.numerics[0][0]} ({how})."
    if len(prov.numerics) == 1:
        one = f"Numerics: MIXED. The {prov.runs} finished runs trained with {prov.numerics[0][0]} ({how}) "
        return settings_line(prov, one)
    code = (
        f"Numerics: MIXED. The {prov.runs} finished runs trained with {len(prov.numerics)} numerics "
        f"({_classes_text(prov.numerics)}; {how}); {prov.numerics_straddling} pair(s) straddle two numerics: "
        "their paired differences carry a code change, as a pair straddling two hardware classes carries the machines'."
    )
    return settings_line(prov, code[:-1] + "; ") if prov.settings_mixed else code


def settings_line(prov: Provenance, head: str) -> str:
    """``head`` with the settings that re-round a run (micro-batch size, world size; DESIGN section 13) where the
    runs differ in them, and each pair that straddles them, in words."""
    pairs = "; ".join(s.words() for s in prov.settings_straddling)
    return (
        f"{head}at {len(prov.settings)} settings that re-round a run ({_classes_text(prov.settings)}, read from each "
        f"result file; '{UNKNOWN}': not recorded); {len(prov.settings_straddling)} pair(s) straddle them"
        + (f" ({pairs})" if pairs else "")
        + ": their paired differences carry another float sum, as a pair straddling two hardware classes carries "
        "the machines'."
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
            "; ".join(f"{n} with the first on {a}, the second on {c}" for (a, c), n in b.oriented) or "none",
            f"{fmt_p(b.p)} ({b.test})" if b.test else "-",
        )
        for b in prov.balance
    )
    return [
        Heading(3, "Hardware balance per comparison"),
        Para(
            "Runs of the first vs the second variant per class, over the comparison's pairs. Balanced: every class "
            "holds as many runs of each side (a class's offset then cancels in the mean paired difference). Only a "
            "pair whose two runs ran on different classes can unbalance it, so the p judges those pairs as pairs: "
            "the exact test that each one's orientation (which side ran on which class) is a fair coin (the sign "
            "test with two classes; with more, exact enumeration ordered by Bowker's statistic). A small p: one "
            "variant went to one class systematically.",
            "note",
        ),
        Table(
            (
                "comparison",
                "cell",
                "runs per class (first vs second)",
                "balanced",
                "pairs across two classes, by side",
                "p",
            ),
            rows,
        ),
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


def _test_text(c: ClassCheck) -> str:
    """The agreement test of one comparison: its verdict in words, p, Holm p and MDE, or why none ran."""
    if not math.isfinite(c.p):
        return c.note
    how = "exact" if c.exact else "Monte Carlo"
    words = "DISAGREE" if c.disagree else "no disagreement shown"
    return (
        f"{words}: p {fmt_p(c.p)} (permutation {fmt_p(c.p_permutation)} {how}, spreads free "
        f"{fmt_p(c.p_spread)}), Holm p {fmt_p(c.holm_p)}; MDE {c.mde_nats:.4f} at level {c.level:.3g}"
    )


def _checks(prov: Provenance) -> list[Block]:
    rows = []
    status = {
        "tested": "yes",
        NO_TEST_RAN: "no: no test ran",
        TOO_FEW: TOO_FEW,
        "zero spread": "no: zero spread",
        "in no test": "no",
    }
    for c in prov.checks:
        for i, r in enumerate(c.rows):
            rows.append(
                (
                    c.comparison if i == 0 else "",
                    cell_label(c.size, c.budget_tokens) if i == 0 else "",
                    "straddling two classes" if r.straddling else "on one class",
                    "-" if r.straddling else str(r.hardware),
                    str(r.n),
                    mean_ci(r.mean, r.ci_low, r.ci_high),
                    status[r.status],
                    _test_text(c) if i == 0 else "",
                )
            )
    return [
        Heading(3, "Variant x hardware: paired differences per class"),
        Para(
            "Each class's pairs (both runs on that class) side by side; the pairs that straddle two classes in a row "
            "of their own, in no test. Agreement: H0 'the hardware does not move this comparison', Welch's F of the "
            "classes' means (unequal variances, Welch 1951) with its p the larger of two: by permutation of the class "
            "labels over the pairs (exact where every relabelling can be counted; valid when the hardware changes "
            "nothing) and from the F law on (classes - 1, the smallest class's pairs - 1) df (spreads free: valid "
            f"when the hardware changes only a class's spread), over the classes with >= {MIN_CLASS_PAIRS} pairs "
            "and a spread (fewer: too few pairs to tell, a floor checked by simulation); Holm across the grid's "
            "agreement tests. The MDE is the smallest shift of one class against the others the test detects with "
            "power 0.8 at Holm's first-step level: a smaller one can go unseen.",
            "note",
        ),
        Table(
            (
                "comparison",
                "cell",
                "pairs",
                "hardware class",
                "n",
                "mean dNLL [95 % CI]",
                "in the test",
                "classes agree?",
            ),
            tuple(rows),
        ),
    ]


def _within(prov: Provenance) -> list[Block]:
    """Every verdict re-decided within one class; only a definite verdict the class reaches again on enough
    pairs counts as holding."""
    whose = "that class's" if prov.tied else "the largest class's"
    head = [
        Heading(3, f"Every verdict within {_largest(prov)}"),
        Para(
            f"The same decisions (plan, families, floors) re-run on {whose} runs alone. Descriptive: "
            "in no family, it changes no verdict above. Power: the chance the class's pairs reach the pooled "
            "verdict again if its effect is the pooled one. A verdict the class does not reach is 'not "
            f"re-decidable' where that power is below {prov.power:g} (fewer pairs, not the mix, is the likelier "
            "reason), 'NO' where the class reaches another verdict or had the power to reach the same one; "
            f"'{TOO_FEW}' where the class holds under {MIN_PAIRS} pairs (it re-decides nothing), "
            f"'{NOTHING_TO_HOLD}' where the pooled verdict decided nothing.",
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
            "-" if not math.isfinite(r.power) else f"{r.power:.2f}",
            r.status,
        )
        for r in prov.within
    )
    held = sum(r.status == YES for r in prov.within)
    no = sum(r.status == NO for r in prov.within)
    few = sum(r.status == TOO_FEW for r in prov.within)
    nothing = sum(r.status == NOTHING_TO_HOLD for r in prov.within)
    open_ = len(prov.within) - held - no - few - nothing
    return head + [
        Table(("cell", "decision", "all runs", f"{prov.largest} only", "n in class", "power", "holds"), rows),
        Para(
            f"{held} of {len(prov.within)} verdict(s) hold within {prov.largest}; {open_} not re-decidable at its "
            "pairs"
            + (f"; {few} with {TOO_FEW} (under {MIN_PAIRS} pairs in the class)" if few else "")
            + (f"; {nothing} with nothing to hold (the pooled verdict decided nothing)" if nothing else "")
            + f"; {no} do not hold.",
            "" if no == 0 else "warn",
        ),
    ]


__all__ = ["banner", "blocks", "hardware_line", "numerics_line"]
