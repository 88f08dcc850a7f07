"""The report's proposal of the factorial follow-up (DESIGN section 12, :mod:`harness.report.followup`).

Where a control reproduces the gain and its gain fraction's 95 % interval lies above 1 (it does
better than the treatment), the gain cannot be credited to the treatment's own change, and the next
question is whether that change still helps on top of the control's: the section names the 2 x 2
factorial that separates the two and the ``harness followup`` command that writes it.
"""

from __future__ import annotations

from harness.models.catalog import load_specs
from harness.report.followup import absorbing, composed_variant, followup_command
from harness.report.render.blocks import Block, Heading, Para
from harness.report.render.sentences import cell_label
from harness.report.stats.results import ControlAssessment, ReportStats


def followup_sentence(stats: ReportStats, a: ControlAssessment) -> str:
    """What the control shows, the factorial that would separate it from the treatment, the command."""
    t, p, c = stats.treatment, stats.parent, a.control
    composed = composed_variant(t, c, p, load_specs())
    corner = (
        f"{composed} (1, 1)"
        if composed
        else f"{t} with {c}'s additions (1, 1), which no shipped spec composes yet: write one in controls/ "
        "(see controls/rd_offset.toml)"
    )
    return (
        f"{cell_label(a.size, a.budget_tokens)}: {c} does better than {t} (gain fraction {a.fraction:.2f}, 95 % "
        f"interval {a.fraction_low:.2f} to {a.fraction_high:.2f}, above 1), so the gain cannot be credited to "
        f"{t}'s own change. Whether that change still helps on top of {c}'s, or {c} absorbs it, is an "
        f"interaction: the factorial grid parent {p} (0, 0), {c} (1, 0), {t} (0, 1), {corner} separates them. "
        f"`{followup_command(stats.grid, c)}` writes it with a plan from this grid's runs (never queues it)."
    )


def blocks(stats: ReportStats) -> list[Block]:
    """The section; none where no control does better than the treatment."""
    found = absorbing(stats)
    if not found:
        return []
    return [Heading(2, "Follow-up: separate the control's change from the treatment's")] + [
        Para(followup_sentence(stats, a), "warn") for a in found
    ]


def summary(stats: ReportStats) -> list[str]:
    """One terminal line per control that does better than the treatment."""
    return [
        f"follow-up: {a.control} does better than {stats.treatment} ({cell_label(a.size, a.budget_tokens)}, "
        f"gain fraction interval {a.fraction_low:.2f}-{a.fraction_high:.2f}): {followup_command(stats.grid, a.control)}"
        for a in absorbing(stats)
    ]
