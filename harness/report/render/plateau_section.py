"""The report section that puts each cell's final NLL next to its unigram plateau
(:mod:`harness.report.stats.plateau`): is the run past the stage where it has learned token frequencies only?"""

from __future__ import annotations

import math

from harness.report.render.blocks import Block, Heading, Para, Table
from harness.report.render.sentences import cell_label
from harness.report.stats.plateau import SPREAD_TOL, PlateauRow
from harness.report.stats.results import ReportStats

#: A worst run less than this far below the plateau (nats/token) is flagged: its differences mostly
#: measure when each seed left the plateau (the demo's goal is 1.5, issue "A demo past the unigram plateau").
NEAR_PLATEAU_NATS = 0.5


def plateau_line(r: PlateauRow) -> str:
    """'small, 1M: unigram plateau 5.429 nats/token; final NLL 4.10-4.16 (mean 4.13); worst run 1.27 below'
    (``above`` for a worst run that ends above the plateau, a negative margin)."""
    label = cell_label(r.size, r.budget_tokens)
    nll = f"final NLL {r.final_min:.3f}-{r.final_max:.3f} (mean {r.final_mean:.3f}, {r.n_runs} runs)"
    if math.isnan(r.unigram_nll):
        return f"{label}: {nll}; unigram plateau not recorded (runs from before the column existed)"
    return f"{label}: unigram plateau {r.unigram_nll:.3f} nats/token; {nll}; the worst run ends {_side(r.margin)} it"


def _side(margin: float) -> str:
    """'1.270 below' or '0.614 above' (margin < 0: the worst run never got under the plateau): a
    positive distance and its side, never a negative distance below."""
    return f"{abs(margin):.3f} {'below' if margin >= 0 else 'above'}"


def blocks(stats: ReportStats) -> list[Block]:
    """The section (none without finished runs)."""
    rows = stats.plateau
    if not rows:
        return []
    out: list[Block] = [
        Heading(2, "Past the unigram plateau?"),
        Para(
            "The plateau is the validation targets' cross-entropy under the training split's unigram distribution "
            "(add-one smoothed): what a model that ignores context scores. Runs near it have learned token "
            "frequencies only, and their paired differences mostly measure when each seed left it. Descriptive: "
            "it enters no verdict.",
            "note",
        ),
    ]
    table = tuple(
        (
            cell_label(r.size, r.budget_tokens),
            "-" if math.isnan(r.unigram_nll) else f"{r.unigram_nll:.3f}",
            f"{r.final_min:.3f} / {r.final_mean:.3f} / {r.final_max:.3f}",
            str(r.n_runs),
            "-" if math.isnan(r.margin) else _side(r.margin),
        )
        for r in rows
    )
    out.append(
        Table(
            (
                "cell",
                "unigram plateau (nats/token)",
                "final NLL min / mean / max",
                "runs",
                "worst run vs the plateau (nats/token)",
            ),
            table,
        )
    )
    out += _near_paras(rows)
    mixed = [cell_label(r.size, r.budget_tokens) for r in rows if r.spread > SPREAD_TOL]
    if mixed:
        out.append(
            Para(
                f"Runs of {', '.join(mixed)} recorded different plateaus: they were scored on different "
                "corpora, vocabularies or validation sets.",
                "warn",
            )
        )
    return out


def _near_paras(rows: list[PlateauRow]) -> list[Block]:
    """The warnings for cells whose worst run ends above the plateau, or under it by less than
    :data:`NEAR_PLATEAU_NATS` (said apart: a run above it has not left it at all)."""
    above = [cell_label(r.size, r.budget_tokens) for r in rows if r.margin < 0]
    near = [cell_label(r.size, r.budget_tokens) for r in rows if 0 <= r.margin < NEAR_PLATEAU_NATS]
    advice = "A gain or a control verdict there says little about depth routing; train longer."
    out: list[Block] = []
    if above:
        out.append(
            Para(f"Above the plateau (the worst run ends above it): {', '.join(above)}. {advice}", "warn")
        )
    if near:
        out.append(
            Para(
                f"Near the plateau (the worst run ends less than {NEAR_PLATEAU_NATS} nats/token below it): "
                f"{', '.join(near)}. {advice}",
                "warn",
            )
        )
    return out


__all__ = ["NEAR_PLATEAU_NATS", "plateau_line", "blocks"]
