"""The seeds a grid's analysis plan lets a cell have: refused past ``max_seeds``, said past the last look
(DESIGN sections 6 and 8).

The plan is fixed before the runs. ``max_seeds`` is the most seeds a cell (size, budget) may get: the
plan prices every "seeds needed" against it and ``harness topup`` never goes beyond it, so a cell with more
seeds is outside its own plan. :func:`check_plan_seeds` refuses it, naming the cell, for every command that
adds runs of a grid (``harness queue`` of a grid whose ``seeds`` grew, ``harness import`` of an archive),
before anything is written: more seeds need a new plan, in a grid with a new ``name``.

With ``looks``, the plan's alpha is spent at the last look: the report tests a cell's first ``looks[-1]``
pairs in seed order and never the seeds after them (:mod:`harness.report.stats.looks`). Seeds added past the
last look (``harness queue`` after ``harness topup`` said the alpha is spent) change no verdict, so they are
not refused; :func:`check_plan_seeds` returns one line per such cell saying they enter no test.

Runs of the grid's ``[tuned]`` table (the robustness row, descriptive) are not counted, as ``topup`` does not.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

#: ``(size, budget_tokens, seed)`` of one untuned run of a grid.
RunSeed = tuple[str, int, int]


def _cells(runs: Iterable[RunSeed]) -> dict[tuple[str, int], set[int]]:
    out: dict[tuple[str, int], set[int]] = {}
    for size, budget, seed in runs:
        out.setdefault((size, int(budget)), set()).add(int(seed))
    return out


def _seed_list(seeds: Iterable[int]) -> str:
    """``0-6 9 11``: the seeds in order, a run of 3 or more consecutive ones as ``first-last``."""
    runs: list[list[int]] = []
    for seed in sorted(seeds):
        if runs and seed == runs[-1][-1] + 1:
            runs[-1].append(seed)
        else:
            runs.append([seed])
    return " ".join(f"{r[0]}-{r[-1]}" if len(r) >= 3 else " ".join(map(str, r)) for r in runs)


def check_plan_seeds(
    grid: str, plan: Mapping, held: Iterable[RunSeed], adding: Iterable[RunSeed]
) -> list[str]:
    """Refuse runs that would give a cell of ``grid`` more seeds than its plan's ``max_seeds``; the lines
    saying which new seeds lie past the plan's last look (module docstring).

    Args:
        grid: the grid's name (for the message).
        plan: its analysis plan as a run config stores it (``max_seeds``, ``looks``:
            :meth:`harness.design.analysis_plan.AnalysisPlan.as_config`).
        held: the untuned runs of the grid the queue holds already (any state: a failed run's seed is used).
        adding: the untuned runs about to be added (those already held are not new).

    Returns:
        One line per cell that gets new seeds past the last look (none without ``looks``).

    Raises:
        ValueError: a cell would hold more than ``max_seeds`` seeds (one line naming the cell, the counts,
            the new seeds and what to do).
    """
    max_seeds, looks = int(plan.get("max_seeds", 30)), tuple(plan.get("looks") or ())
    held = list(held)
    before, after = _cells(held), _cells([*held, *adding])
    notes = []
    for (size, budget), seeds in sorted(after.items()):
        old = before.get((size, budget), set())
        new = seeds - old
        if not new:
            continue
        cell = f"cell {size}/{budget:_}"
        if len(seeds) > max_seeds:
            raise ValueError(
                f"grid {grid}: {cell} would hold {len(seeds)} seeds ({len(old)} queued, new: {_seed_list(new)}), "
                f"more than its analysis plan's max_seeds {max_seeds}, the most seeds a cell may get, fixed "
                "before the runs: more seeds need a new plan, in a grid with a new `name`"
            )
        past = set(sorted(seeds)[looks[-1] :]) & new if looks else set()
        if past:
            notes.append(
                f"note: grid {grid}, {cell}: seed(s) {_seed_list(past)} lie past the plan's last look "
                f"({looks[-1]} seeds), where its alpha is spent: they enter no test, only the descriptives "
                "(seeds that count need a new plan, in a grid with a new `name`)"
            )
    return notes


__all__ = ["RunSeed", "check_plan_seeds"]
