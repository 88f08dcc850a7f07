"""``harness topup``'s lines: one per cell, what was (or would be) queued and why (:mod:`harness.report.stats.topup`)."""

from __future__ import annotations

from harness.report.render.fmt import fmt_tokens
from harness.report.stats.topup import CellTopup


def cell_name(t: CellTopup) -> str:
    """'cell small/1M': the cell a topup line is about."""
    return f"cell {t.size}/{fmt_tokens(t.budget_tokens)}"


def describe(t: CellTopup, *, dry_run: bool = False) -> str:
    """One line per cell: what was (or would be) queued and why, or why nothing."""
    cell = cell_name(t)
    if not t.open:
        return (
            f"{cell}: {t.reason}: nothing to add"
            if "nothing to add" not in t.reason
            else f"{cell}: {t.reason}"
        )
    waiting = f"seed(s) {' '.join(map(str, t.pending))} already queued" if t.pending else ""
    if not t.new_seeds:
        return f"{cell}: {t.reason}; next look {t.next_look}: {waiting} (waiting for workers): nothing to add"
    verb = "would queue" if dry_run else "queued"
    runs = len(t.new_seeds) * len(t.variants)
    also = f" ({waiting})" if waiting else ""
    return (
        f"{cell}: {t.reason}; next look {t.next_look}: {verb} seed(s) {' '.join(map(str, t.new_seeds))} for "
        f"{len(t.variants)} variants ({runs} runs){also}"
    )


__all__ = ["cell_name", "describe"]
