"""Words for a :class:`harness.report.stats.analysis.ReportStats`: the report in reading order and the CLI summary.

:func:`layout` puts the sections in order: the top (:mod:`harness.report.render.summary`: grid status,
verdict banners, chips, how to read it), the warnings, the decisions (:mod:`harness.report.render.decision_sections`:
plan, Step 1 headline, Step 2 controls), the follow-up, robustness and factorial sections, the evidence
(:mod:`harness.report.render.evidence_sections`: A/A, divergence, descriptives, mixed model, gain vs budget), the
figures, the provenance (:mod:`harness.report.render.provenance_section`; its one-line banner at the top where the
runs mix hardware classes), Methods (:mod:`harness.report.render.methods_section`) and the runs left out. Nothing here computes a
statistic. Sections are lists of blocks (:mod:`harness.report.render.blocks`), written out as Markdown
and as one self-contained HTML file. Sentence helpers (``headline_sentence``, ``control_sentence``,
``aa_sentence``) live in :mod:`harness.report.render.sentences`, shared with ``harness report``'s terminal summary.
"""

from __future__ import annotations

from harness.report.render import axis_section, factorial_section, multiplier_section
from harness.report.render.blocks import Block, Bullets, Heading, Image, Para, Table, to_html, to_markdown
from harness.report.render.decision_sections import (
    controls_blocks,
    headline_blocks,
    influence_blocks,
    plan_blocks,
)
from harness.report.render.evidence_sections import (
    aa_blocks,
    comparisons_blocks,
    divergence_blocks,
    gain_vs_budget_blocks,
    mixed_blocks,
)
from harness.report.render.figures import FigureOut
from harness.report.render.fmt import cell_text as _cell
from harness.report.render.fmt import num as _num
from harness.report.render.fmt import seeds_text as _seeds
from harness.report.render.fmt import tokens_label
from harness.report.render.followup_section import blocks as followup_blocks
from harness.report.render.followup_section import summary as followup_summary
from harness.report.render.methods_section import methods_blocks
from harness.report.render.plateau_section import blocks as plateau_blocks
from harness.report.render.plateau_section import plateau_line
from harness.report.render.provenance_section import banner as hardware_banner
from harness.report.render.provenance_section import blocks as provenance_blocks
from harness.report.render.provenance_section import hardware_line, numerics_line
from harness.report.render.robustness_section import blocks as robustness_blocks
from harness.report.render.sentences import (
    aa_sentence,
    cell_label,
    control_sentence,
    headline_sentence,
)
from harness.report.render.summary import (
    grid_status,
    how_to_read,
    progress_sentence,
    roles_text,
    verdict_banners,
)
from harness.report.stats.pairing import cell_name
from harness.report.stats.progress import NOT_IN_STORE, UNREADABLE
from harness.report.stats.results import ReportStats

# --------------------------------------------------------------------------- sections


def _top_warnings(stats: ReportStats) -> list[Block]:
    items = [
        f"{r.variant} diverged at seed(s) {_seeds(r.diverged_seeds)} ({_cell(r.size, r.budget_tokens)}): "
        "each such seed counts as a loss for it in every test where its comparator finished (d = the largest "
        "|d| observed, with the sign of a loss; divergence table below)"
        for r in stats.diverged()
    ]
    items += _no_result_warnings(stats)
    items += [
        f"A/A check, {_cell(a.size, a.budget_tokens)}: {aa_sentence(a, stats.plan.alpha)}"
        for a in stats.aa_checks
        if a.status == "FAIL"
    ]
    items += list(stats.warnings)
    return [Heading(2, "Warnings"), Bullets(tuple(items), "warn")] if items else []


def _no_result_warnings(stats: ReportStats) -> list[str]:
    """Top-of-report warnings for runs with no result in the store (finished per the queue, or unreadable)."""
    p = stats.progress
    if p is None:
        return []
    out = []
    for state, what in (
        (NOT_IN_STORE, "the queue says finished but no result file is in the store"),
        (UNREADABLE, "its result file could not be read"),
    ):
        runs = [r for r in p.runs if r.state == state]
        if runs:
            out.append(
                f"{len(runs)} run(s) have no usable result ({what}): "
                + ", ".join(_run_label(r) for r in runs[:8])
                + (", ..." if len(runs) > 8 else "")
                + "; they are in no statistic (grid status below)"
            )
    return out


def _run_label(r) -> str:
    """'rd_attnres s0 (small, 1M)', or the run id where only the file name is known (an unreadable
    result file of a run the queue does not list)."""
    if r.variant is None:
        return r.run_id
    return f"{r.variant} s{r.seed} ({_cell(r.size, r.budget_tokens)})"


def _left_out(stats: ReportStats) -> list[Block]:
    out: list[Block] = [Heading(2, "Runs left out, and why")]
    p = stats.progress
    if stats.left_out:
        out.append(
            Table(
                ("run", "variant", "seed", "cell", "status", "reason"),
                tuple(
                    (
                        lo.run_id,
                        lo.variant,
                        str(lo.seed),
                        cell_label(lo.size, lo.budget_tokens),
                        lo.status,
                        lo.reason,
                    )
                    for lo in stats.left_out
                ),
            )
        )
    elif p.complete:
        out.append(Para(f"None: all {p.total} runs of the grid finished and entered the statistics."))
    else:
        out.append(
            Para("None of the finished runs in the results store was left out. " + progress_sentence(p)[0])
        )
    return out


def _figures(stats: ReportStats, figures: list[FigureOut]) -> list[Block]:
    """Figures per cell, in the order drawn; figures across cells (``cell`` None, e.g. gain vs
    budget, DESIGN 8) in their own section."""
    out: list[Block] = [Heading(2, "Figures")]
    in_sections = (factorial_section.FIGURE_PREFIX, multiplier_section.FIGURE_PREFIX)
    figures = [f for f in figures if not f.name.startswith(in_sections)]  # in their sections
    if not figures and stats.pairs:  # pairs always draw their paired differences: none were asked for
        return out + [Para("No figure: this report was written without figures (`--no-figures`).", "note")]
    if not figures:
        return out + [Para("No figure: no pairs, training or validation curves, or routing rows.", "note")]
    cells = [c for c in stats.cells if any(f.cell == c for f in figures)]
    for size, budget in cells:
        out.append(Heading(3, cell_name(size, tokens_label(budget))))
        for f in figures:
            if f.cell == (size, budget):
                out += [Heading(4, f.title), Image(f), Para(f.caption, "note")]
    return out + _across_cells(stats, [f for f in figures if f.cell is None])


def _across_cells(stats: ReportStats, figures: list[FigureOut]) -> list[Block]:
    """Gain vs budget (DESIGN 8): figures that span the cells of a size (``FigureOut.cell`` None)."""
    budgets: dict[str, set[int]] = {}
    for size, budget in stats.cells:
        budgets.setdefault(size, set()).add(budget)
    several = [s for s, b in budgets.items() if len(b) > 1]
    if not figures and not several:
        return []
    out: list[Block] = [Heading(3, "Gain vs budget")]
    for f in figures:
        out += [Heading(4, f.title), Image(f), Para(f.caption, "note")]
    if not figures:
        out.append(
            Para(
                f"Size(s) {', '.join(several)} have several budgets; the per-cell tables above give each "
                "budget's paired difference (this report draws no gain-vs-budget figure yet).",
                "note",
            )
        )
    return out


def layout(stats: ReportStats, figures: list[FigureOut], *, generated: str = "") -> list[Block]:
    """The report as blocks, in reading order: status and verdicts first, then the evidence."""
    blocks: list[Block] = [
        Heading(1, f"Paired significance report: grid {stats.grid or '(all)'}"),
        Para(
            f"{generated + '. ' if generated else ''}{roles_text(stats)} {len(stats.pairs)} pairs over "
            f"{len(stats.comparisons)} comparisons; {len(stats.left_out)} run(s) or pair(s) left out.",
            "note",
        ),
        Para(*progress_sentence(stats.progress)),
    ]
    blocks += hardware_banner(stats)  # one line where the runs mix hardware classes: never a silent pool
    blocks += verdict_banners(stats) + axis_section.blocks(stats) + _top_warnings(stats)
    blocks += how_to_read(stats) + grid_status(stats)
    blocks += plateau_blocks(stats)
    blocks += plan_blocks(stats) + headline_blocks(stats) + controls_blocks(stats) + followup_blocks(stats)
    blocks += robustness_blocks(stats) + factorial_section.blocks(stats, figures) + influence_blocks(stats)
    blocks += aa_blocks(stats)
    blocks += divergence_blocks(stats)
    blocks += (
        gain_vs_budget_blocks(stats)
        + multiplier_section.blocks(stats, figures)
        + _figures(stats, figures)
        + comparisons_blocks(stats)
        + mixed_blocks(stats)
        + provenance_blocks(stats)
    )
    return blocks + methods_blocks(stats) + _left_out(stats)


def summary_lines(stats: ReportStats) -> list[str]:
    """Plain-text summary for the terminal: headline per cell, control verdicts, A/A, divergence."""
    lines = [f"runs: {progress_sentence(stats.progress)[0]}"]
    if stats.provenance is not None:
        lines.append(hardware_line(stats))
        if stats.provenance.runs:  # report.md's Provenance line, on the terminal too
            lines.append(numerics_line(stats.provenance))
    lines += [
        f"plan: alpha {stats.plan.alpha:g}, rho {stats.plan.reproduce_fraction:g}, min_effect_nats "
        f"{_num(stats.plan.min_effect_nats, '.4g') if stats.plan.min_effect_nats else 'not set'}, power "
        f"{stats.plan.power:g}, max_seeds {stats.plan.max_seeds}, looks "
        f"{', '.join(map(str, stats.plan.looks)) or 'none'}"
    ]
    lines += [
        f"diverged: {r.variant} {r.size} {r.budget_tokens} seed(s) {_seeds(r.diverged_seeds)}"
        for r in stats.diverged()
    ]
    lines += [f"plateau: {plateau_line(r)}" for r in stats.plateau]
    for h in stats.headlines:
        lines.append(headline_sentence(h, stats.plan.power, stats.plan.min_effect_nats).replace("**", ""))
    for a in stats.assessments:
        lines.append(
            f"  {a.control:<16} {a.size:<8} {a.budget_tokens:>12}  {a.verdict}  "
            f"({control_sentence(a, stats.plan.power)})"
        )
    lines += followup_summary(stats)
    for a in stats.aa_checks:
        lines.append(f"  A/A {a.variant} {a.size} {a.budget_tokens}: {aa_sentence(a, stats.plan.alpha)}")
    return (
        lines
        + axis_section.summary_lines(stats)
        + factorial_section.summary_lines(stats)
        + multiplier_section.summary_lines(stats)
    )


def render_markdown(
    stats: ReportStats, figures: list[FigureOut], *, generated: str = "", figure_dir: str = "figures"
) -> str:
    """``report.md``: the report with figures linked from ``figure_dir``."""
    return to_markdown(layout(stats, figures, generated=generated), figure_dir)


def render_html(stats: ReportStats, figures: list[FigureOut], *, generated: str = "") -> str:
    """``report.html``: the same report, one self-contained file."""
    return to_html(
        layout(stats, figures, generated=generated), f"Paired significance report: {stats.grid or '(all)'}"
    )


__all__ = ["layout", "render_markdown", "render_html", "summary_lines"]
