"""Which cells can still decide something, and which seeds to add (DESIGN section 8, ``harness topup``).

A cell is *open* when its headline or any control verdict is still undecided (DESIGN 6 v3:
``harness topup`` tops up undecided cells only):

* the headline is ``undecided`` (neither established nor absent) before the last look
  (or before the first). At the last look the plan's alpha is spent and it is final;
* or the gain is established and some control is ``inconclusive``;
* or the grid has a ``[factorial]`` design (DESIGN section 12) whose interaction is not established
  in this cell before the last look. The interaction is the question a factorial grid is queued to
  answer, and its family is tested at each look's share of alpha like the headline, so topping it up
  does not inflate its false-positive rate.

A cell whose gain is ``gain absent (< delta nats/token)`` is decided: closed.

A degenerate treatment, a cell without a treatment, or a cell whose gain is established
and every control decided (``does not reproduce gain``, ``reproduces gain``, ``invalid:
degenerate``) is closed. An open cell gets seeds up to its next look, for every variant
(pairs need the same seeds), when that look is <= ``max_seeds``; a cell at or past its
last look gets none. There is no futility stop: the plan has no futility boundary, so an
open cell stays open until its last look.

Seeds already queued or running (and finished runs not yet paired) count toward the next
look, so running ``harness topup`` twice adds nothing the second time. New seeds are the
next integers above every seed the cell has used. This module decides (:mod:`harness.report.render.topup_lines`
words it); it never touches the queue (``harness/commands/topup.py`` does, in a handful of calls).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from harness.report.stats import decisions as dec
from harness.report.stats.factorial import INTERACTION
from harness.report.stats.looks import look_at, look_text
from harness.report.stats.results import ReportStats


def cell_open(established, headline_last, codes, absent=False) -> np.ndarray:
    """``[...]`` bool: the headline is undecided (neither established nor ``absent``, not at its last
    look) or the gain is established and a control verdict (``codes [..., C]``,
    :data:`harness.report.stats.decisions.VERDICTS` indices) is inconclusive. Whether seeds can still be added
    (a next look exists) is separate."""
    established, headline_last = np.asarray(established, bool), np.asarray(headline_last, bool)
    absent = np.asarray(absent, bool)
    inconclusive = (np.asarray(codes) == dec.V_INCONCLUSIVE).any(axis=-1)
    return (~established & ~absent & ~headline_last) | (established & inconclusive)


@dataclass(frozen=True, slots=True)
class CellSeeds:
    """What the queue holds for one cell (size, budget).

    Attributes:
        used: every seed any run of the cell has, in any state.
        pending: seeds whose parent and treatment runs are both queued, running or done but
            not yet paired: they count toward the next look.
        variants: the cell's variants (every one gets the new seeds).
    """

    used: frozenset[int]
    pending: frozenset[int]
    variants: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class CellTopup:
    """The decision for one cell.

    Attributes:
        open: the cell can still decide something (module docstring).
        reason: why it is open or closed, in words.
        next_look: the seed count seeds are added up to (None: none to reach).
        new_seeds: seeds to enqueue for every variant of ``variants``.
        pending: seeds already on their way to the next look.
        variants: the cell's variants.
    """

    size: str
    budget_tokens: int
    open: bool
    reason: str
    next_look: int | None = None
    new_seeds: tuple[int, ...] = ()
    pending: tuple[int, ...] = ()
    variants: tuple[str, ...] = field(default=())


def _factorial_open(stats: ReportStats, size: str, budget: int) -> str | None:
    """Why the cell's factorial interaction is still open (not established, not at its last look),
    or None where the grid has no factorial, the interaction is established or its alpha is spent."""
    cell = next((f for f in stats.factorial if (f.size, f.budget_tokens) == (size, budget)), None)
    if cell is None:
        return None
    inter = cell.contrast(INTERACTION)
    if inter.established or inter.look.last:
        return None
    where = look_text(inter.look) or f"{inter.n} seeds"
    return f"factorial interaction not established at {where}"


def _why_open(stats: ReportStats, size: str, budget: int) -> tuple[bool, str]:
    """(open, reason) of one cell: its headline and controls' verdicts, then its factorial interaction
    (:func:`_factorial_open`), which keeps a cell open whose headline and controls are decided."""
    open_, reason = _why_headline_open(stats, size, budget)
    factorial = _factorial_open(stats, size, budget)
    if factorial is None or open_:
        return open_, reason if factorial is None else f"{reason}; {factorial}"
    h = stats.headline(size, budget)
    if h is None or h.verdict == dec.DEGENERATE:  # no gain to attribute: the factorial cannot help
        return open_, reason
    return True, f"{reason}, but the {factorial}"


def _why_headline_open(stats: ReportStats, size: str, budget: int) -> tuple[bool, str]:
    """(open, reason) from the report's verdicts of one cell."""
    h = stats.headline(size, budget)
    if h is None:
        return False, "no treatment runs: there is no gain to decide"
    if h.verdict == dec.DEGENERATE:
        return False, f"the treatment is degenerate ({h.degenerate_reason}): more seeds cannot help"
    controls = [a for a in stats.assessments if (a.size, a.budget_tokens) == (size, budget)]
    if h.established:
        open_ = [a.control for a in controls if a.verdict == dec.INCONCLUSIVE]
        if not open_:
            return False, "headline gain established and every control decided"
        return True, f"headline gain established; inconclusive: {', '.join(open_)}"
    if h.absent:
        return False, f"headline {h.verdict}: decided, more seeds cannot change it"
    if h.look.last:
        return False, f"gain undecided at the last look ({look_text(h.look)}): the plan's alpha is spent"
    where = look_text(h.look) or f"{h.n} pairs"
    return True, f"headline undecided at {where} (neither established nor absent)"


def alpha_spent_text(stats: ReportStats) -> str | None:
    """The line ``harness topup`` ends with when every cell is at (or past) the plan's last look: its
    alpha is spent, so no seed can be added to this plan (DESIGN section 8); None otherwise."""
    looks = stats.plan.looks
    heads = [stats.headline(size, budget) for size, budget in stats.cells]
    if not looks or not heads or any(h is None or not h.look.last for h in heads):
        return None
    return (
        f"the last look ({looks[-1]}) has passed and alpha is spent; more seeds need a new plan "
        "(`harness followup`)"
    )


def plan_topup(stats: ReportStats, cells: Mapping[tuple[str, int], CellSeeds]) -> list[CellTopup]:
    """Decide, per cell of ``stats``, whether to add seeds and which (module docstring).

    Args:
        stats: the grid's report statistics (:func:`harness.report.stats.analysis.analyze`), whose plan has looks.
        cells: what the queue holds per (size, budget) (:class:`CellSeeds`).

    Raises:
        ValueError: the plan has no looks (adding seeds and reading again at the full alpha
            would inflate the false-positive rate).
    """
    plan = stats.plan
    if not plan.looks:
        raise ValueError(
            f"grid {stats.grid!r}: its analysis plan has no looks, so its alpha is spent at one "
            "reading; adding seeds and reading again would inflate the false-positive rate. Plan "
            "looks before the runs ([analysis] looks = [3, 5, 10]) in a grid with a new name, as "
            "ablations/rd_controls_seq.toml does"
        )
    out = []
    for size, budget in stats.cells:
        h = stats.headline(size, budget)
        held = cells.get((size, budget), CellSeeds(frozenset(), frozenset(), ()))
        open_, reason = _why_open(stats, size, budget)
        if not open_:
            out.append(
                CellTopup(size=size, budget_tokens=budget, open=False, reason=reason, variants=held.variants)
            )
            continue
        comp = next(
            (
                c
                for c in stats.comparisons
                if (c.comparison, c.size, c.budget_tokens) == (h.comparison, size, budget)
            ),
            None,
        )
        paired = set(comp.seeds) if comp is not None else set()
        pending = sorted(held.pending - paired)
        look = look_at(len(paired), plan.looks, plan.alpha)
        target = look.next_n
        if target is None:
            out.append(
                CellTopup(
                    size=size,
                    budget_tokens=budget,
                    open=False,
                    reason=f"{reason}; past the last look: nothing to add",
                    variants=held.variants,
                )
            )
            continue
        if target > plan.max_seeds:
            out.append(
                CellTopup(
                    size=size,
                    budget_tokens=budget,
                    open=False,
                    reason=f"{reason}; next look {target} > max_seeds {plan.max_seeds}",
                    next_look=target,
                    variants=held.variants,
                )
            )
            continue
        k = max(0, target - len(paired) - len(pending))
        start = max(held.used | paired, default=-1) + 1
        out.append(
            CellTopup(
                size=size,
                budget_tokens=budget,
                open=True,
                reason=reason,
                next_look=target,
                new_seeds=tuple(range(start, start + k)),
                pending=tuple(pending),
                variants=held.variants,
            )
        )
    return out


__all__ = ["alpha_spent_text", "cell_open", "CellSeeds", "CellTopup", "plan_topup"]
