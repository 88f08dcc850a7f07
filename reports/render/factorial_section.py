"""The report's factorial section (DESIGN section 12): per cell the verdict sentences, the table of the
seven contrasts and the interaction plot, from :mod:`reports.stats.factorial` (nothing is recomputed).

The interaction plot (:func:`interaction_plot`): x = the levels of factor A, one line per level of B, each
point the mean final NLL of that combination over the seeds where all four finished with its 95 % t
interval across seeds (seed-to-seed spread included; the paired contrasts in the table are the tests).
Parallel lines = no interaction.
"""

from __future__ import annotations

import math

from matplotlib.figure import Figure

from reports.render.blocks import Block, Bullets, Heading, Image, Para, Table
from reports.render.figures import FigureOut, png_bytes
from reports.render.sentences import cell_label
from reports.stats.analysis import ReportStats
from reports.stats.factorial import MAIN, FactorialCell, FactorialContrast
from reports.stats.looks import look_text

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


def _row(c: FactorialContrast) -> tuple[str, ...]:
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
            "rests on a mean within the numerical floor.",
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
        out.append(
            Table(
                ("contrast", "mean", "95 % interval", "wins", "p", "Holm p", "verdict"),
                tuple(_row(c) for c in cell.contrasts),
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
