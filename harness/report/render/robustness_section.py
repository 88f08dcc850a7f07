"""The report section of the tuned robustness rows (DESIGN section 9), computed by :mod:`harness.report.stats.robustness`."""

from __future__ import annotations

import math

from harness.report.render.blocks import Block, Heading, Para, Table
from harness.report.render.fmt import fmt_p
from harness.report.render.sentences import cell_label, mean_ci
from harness.report.stats.results import ReportStats


def blocks(stats: ReportStats) -> list[Block]:
    """The report section of the robustness rows (none without ``[tuned]`` runs)."""
    rows = stats.robustness
    if not rows:
        return []
    out: list[Block] = [
        Heading(2, "Robustness: treatment (tuned) - parent (tuned)"),
        Para(
            "Does the gain survive giving each side its own tuned settings (DESIGN 9)? Each variant's [tuned] runs "
            "pair by seed; their protocols differ only in the tuned fields listed. Descriptive: one-sided paired t "
            f"p at alpha {stats.plan.alpha:g}, in no family and no verdict.",
            "note",
        ),
    ]
    table = []
    for r in rows:
        s = r.comparison.stats
        table.append(
            (
                r.comparison.comparison,
                cell_label(r.comparison.size, r.comparison.budget_tokens),
                f"{s.wins}/{s.n}",
                mean_ci(s.mean, s.ci_low, s.ci_high),
                fmt_p(r.p_one_sided),
                "-" if math.isnan(r.untuned_mean) else f"{r.untuned_mean:+.3g}",
                "; ".join(r.fields) or "-",
                f"{r.sources[0]} / {r.sources[1]}",
            )
        )
    out.append(
        Table(
            (
                "comparison",
                "cell",
                "wins (k/n)",
                "mean dNLL [95 % CI]",
                "one-sided p",
                "untuned mean dNLL",
                "tuned fields",
                "sources (treatment / parent)",
            ),
            tuple(table),
        )
    )
    lost = [
        f"{r.comparison.comparison} ({cell_label(r.comparison.size, r.comparison.budget_tokens)}): "
        + "; ".join(r.comparison.missing)
        for r in rows
        if r.comparison.missing
    ]
    if lost:
        out.append(Para("Left out: " + " | ".join(lost), "warn"))
    return out


__all__ = ["blocks"]
