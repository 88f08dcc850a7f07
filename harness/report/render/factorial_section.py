"""The report's factorial section (DESIGN section 12): per cell the verdict sentences, the table of the
seven contrasts and the interaction plot, from :mod:`harness.report.stats.factorial` (nothing is recomputed).

The interaction plot (:func:`interaction_plot`): x = the levels of factor A, one line per level of B, each
point the mean final NLL of that combination over the seeds where all four finished with its 95 % t
interval across seeds (seed-to-seed spread included; the paired contrasts in the table are the tests).
Parallel lines = no interaction.
"""

from __future__ import annotations

import math

from matplotlib.figure import Figure

from harness.report.render.blocks import Block, Bullets, Heading, Image, Para, Table
from harness.report.render.figures import FigureOut, png_bytes
from harness.report.render.sentences import cell_label, fraction_text
from harness.report.stats.factorial import COMBOS, MAIN, SIMPLE, FactorialCell, FactorialContrast
from harness.report.stats.looks import look_text
from harness.report.stats.results import ReportStats

FIGURE_PREFIX = "factorial_"  # figure names of this section (the Figures section leaves them to it)
_LINE_COLORS = ("#1f77b4", "#d62728")  # B = 0, B = 1


def interaction_plot(cell: FactorialCell) -> FigureOut:
    """The interaction plot of one cell (module docstring) as a :class:`FigureOut`."""
    a, b = cell.design.factors
    fig = Figure(figsize=(5.2, 3.6))
    ax = fig.add_subplot(1, 1, 1)
    for lb in (0, 1):
        xs = [0.0 + (lb - 0.5) * 0.04, 1.0 + (lb - 0.5) * 0.04]  # dodge the two lines' intervals
        ys = [cell.means[(la, lb)] for la in (0, 1)]
        lo = [cell.means[(la, lb)] - cell.ci_low[(la, lb)] for la in (0, 1)]
        hi = [cell.ci_high[(la, lb)] - cell.means[(la, lb)] for la in (0, 1)]
        err = None if any(map(math.isnan, lo + hi)) else [lo, hi]
        names = " -> ".join(cell.design.variant(la, lb) for la in (0, 1))
        ax.errorbar(
            xs, ys, yerr=err, marker="o", capsize=4, color=_LINE_COLORS[lb], label=f"{b} = {lb} ({names})"
        )
    ax.set_xticks([0, 1], [f"{a} = 0", f"{a} = 1"])
    ax.set_xlim(-0.3, 1.3)
    ax.set_ylabel("final validation NLL (nats/token)")
    ax.set_title(f"{a} x {b}: {cell_label(cell.size, cell.budget_tokens)}, {cell.n_all} seeds", fontsize=10)
    ax.legend(fontsize=8, loc="best")
    ax.grid(alpha=0.3)
    caption = (
        f"Mean final NLL of each combination over the {cell.n_all} seeds where all four variants finished, "
        f"with its 95 % t interval across seeds (seed-to-seed spread included; the paired contrasts in the "
        f"table remove it). x: {a}; one line per level of {b}. Parallel lines: no interaction; lower is better."
    )
    return FigureOut(
        name=f"{FIGURE_PREFIX}{cell.size}_{cell.budget_tokens}",
        title=f"Interaction plot: {a} x {b}",
        caption=caption,
        png=png_bytes(fig),
        cell=(cell.size, cell.budget_tokens),
    )


def _p(x: float) -> str:
    return "-" if math.isnan(x) else f"{x:.3g}"


def _pair(cell: FactorialCell, c: FactorialContrast) -> tuple[str, str] | None:
    """(first, second) variant of a simple effect (first - second), else ``None``."""
    if c.spec.kind != SIMPLE:
        return None
    side = {int(w): cell.design.variant(*k) for k, w in zip(COMBOS, c.spec.weights) if w != 0}
    return side[1], side[-1]


def _fraction(stats: ReportStats, cell: FactorialCell, c: FactorialContrast) -> str:
    """The gain fraction step 2 gives for a simple effect's pair (control - parent), as step 2 prints
    it (nothing recomputed); the headline's own pair is the gain (1); other contrasts: '-'."""
    pair = _pair(cell, c)
    if pair is None or pair[1] != stats.parent:
        return "-"
    if pair[0] == stats.treatment:
        return "1 (the gain, step 1)"
    a = stats.assessment(pair[0], cell.size, cell.budget_tokens)
    return "-" if a is None else fraction_text(a)


def judged_apart(stats: ReportStats, cell: FactorialCell) -> str | None:
    """One line where step 1 and this table judge the headline's pair differently, saying why; else None."""
    h = stats.headline(cell.size, cell.budget_tokens)
    c = next((c for c in cell.contrasts if _pair(cell, c) == (stats.treatment, stats.parent)), None)
    if h is None or c is None or h.established == c.established:
        return None
    return (
        f"{stats.treatment} - {stats.parent} is '{h.verdict}' in step 1 (Holm p {_p(h.holm_p)}) and "
        f"'{c.verdict}' here (Holm p {_p(c.holm_p)}): both are right. Step 1 asks one question, one-sided "
        f"(is the treatment better?), in its own family over the cells; here the same pair is one of "
        f"{c.family_size} two-sided tests under Holm (does the factor change the NLL either way?), so it "
        "needs a smaller p."
    )


def _row(stats: ReportStats, cell: FactorialCell, c: FactorialContrast) -> tuple[str, ...]:
    s = c.comparison.stats
    ci = "-" if math.isnan(s.ci_low) else f"[{s.ci_low:+.4f}, {s.ci_high:+.4f}]"
    p = _p(c.p) + (" (exact)" if c.exact else "")
    return (
        c.comparison.comparison,
        f"{c.mean:+.4f}" if c.n else "-",
        ci,
        f"{s.wins}/{s.n}",
        p,
        _p(c.holm_p),
        c.verdict,
        _fraction(stats, cell, c),
    )


def blocks(stats: ReportStats, figures: list[FigureOut]) -> list[Block]:
    """The section (none when the grid has no ``[factorial]`` table or no cell has its runs)."""
    if not stats.factorial:
        return []
    a, b = stats.factorial[0].design.factors
    family = stats.factorial[0].contrasts[0].family_size
    out: list[Block] = [
        Heading(2, f"Factorial attribution: {a} x {b}"),
        Para(
            f"Each contrast is a per-seed combination of the four runs of one seed (nats/token; negative = lower "
            f"NLL = the factor helps): a factor's simple effect at each level of the other, its main effect (the "
            f"mean of the two) and the interaction ({b}'s effect with {a} minus without). Two-sided paired "
            f"t-test (exact sign-flip p at zero spread); Holm over the grid's factorial family: the four simple "
            f"effects and the interaction of every cell ({family} tests); main effects are shown, in no "
            "family. A seed where one of a contrast's runs diverged counts as a loss for it; no verdict "
            "rests on a mean within the numerical floor. Gain fraction: for a simple effect of a control "
            "against the parent, the fraction of the treatment's gain step 2 gives for that pair, f = mean(c - p) "
            "/ mean(t - p) with its 95 % Fieller interval ('-' where step 2 gives none).",
            "note",
        ),
    ]
    by_name = {f.name: f for f in figures}
    for cell in stats.factorial:
        out.append(Heading(3, f"{cell_label(cell.size, cell.budget_tokens)}"))
        out.append(Bullets(cell.verdicts))
        look = look_text(cell.contrasts[0].look)
        if look:
            out.append(Para(f"Sequential plan: {look}.", "note"))
        apart = judged_apart(stats, cell)
        if apart:
            out.append(Para(apart, "note"))
        out.append(
            Table(
                (
                    "contrast",
                    "mean",
                    "95 % interval",
                    "wins",
                    "p",
                    "Holm p",
                    "verdict",
                    "gain fraction f (step 2)",
                ),
                tuple(_row(stats, cell, c) for c in cell.contrasts),
                details=tuple(
                    "" if c.spec.kind == MAIN else f"{c.reason}; seeds {' '.join(map(str, c.seeds))}"
                    for c in cell.contrasts
                ),
            )
        )
        fig = by_name.get(f"{FIGURE_PREFIX}{cell.size}_{cell.budget_tokens}")
        if fig is not None:
            out += [Image(fig), Para(fig.caption, "note")]
    return out


def summary_lines(stats: ReportStats) -> list[str]:
    """The terminal's factorial lines: each cell's verdict sentences."""
    return [
        f"factorial {cell.size} {cell.budget_tokens}: {v}" for cell in stats.factorial for v in cell.verdicts
    ]


__all__ = ["FIGURE_PREFIX", "blocks", "interaction_plot", "summary_lines"]
