"""A grid's ``[factorial]`` table: binary factors and the variant at each combination (DESIGN section 12).

::

    [factorial]
    factors = ["offset", "decoupled_v"]
    levels = { block_attnres = [0, 0], param_matched = [1, 0], rd_attnres = [0, 1], rd_offset = [1, 1] }

Two binary factors A and B (the names are the grid's), and for each of the 2 x 2 combinations
exactly one variant of the grid. ``harness queue`` checks the table (:func:`parse_factorial`)
and stores it with the analysis plan in every run's config, so it is fixed before the runs like
the rest of the plan; the report's factorial statistics (``harness/report/stats/factorial.py``) read it
back. A grid may hold variants outside the factorial (the A/A check, other controls).

This module imports nothing from ``harness``: :mod:`harness.design.analysis_plan` imports it.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

N_FACTORS = 2  # the interaction contrast of DESIGN section 12 is defined for two factors
FACTORIAL_KEYS = {
    "factors": f"the names of the {N_FACTORS} binary factors, e.g. [\"offset\", \"decoupled_v\"]",
    "levels": "variant -> its level of each factor (0 or 1), every combination exactly once",
}


@dataclass(frozen=True, slots=True)
class Factorial:
    """A 2 x 2 factorial design over four variants of a grid.

    Attributes:
        factors: ``(A, B)``, the factor names.
        levels: ``((variant, (a, b)), ...)`` in the order written, one per combination.
    """

    factors: tuple[str, str]
    levels: tuple[tuple[str, tuple[int, int]], ...]

    def variant(self, a: int, b: int) -> str:
        """The variant at level ``a`` of factor A and ``b`` of factor B."""
        return next(v for v, lv in self.levels if lv == (a, b))

    @property
    def variants(self) -> tuple[str, ...]:
        """The four variants, in the order written."""
        return tuple(v for v, _ in self.levels)

    def as_config(self) -> dict[str, Any]:
        """The JSON-able form stored with the analysis plan (and read back by :func:`parse_factorial`)."""
        return {"factors": list(self.factors), "levels": {v: list(lv) for v, lv in self.levels}}


def parse_factorial(
    table: Any, variants: dict[str, str] | None = None, *, where: str = "<grid>"
) -> Factorial:
    """Check a ``[factorial]`` table and build a :class:`Factorial`.

    Args:
        table: the parsed TOML table, or the stored :meth:`Factorial.as_config` dict.
        variants: the grid's ``[variants]`` (name -> role); every name in ``levels`` must be one.
            None skips that check (a stored table read back from runs).
        where: the grid file, for messages.

    Raises:
        ValueError: one line ``FILE: factorial.KEY: ...`` naming the key and what is allowed:
            not a table, unknown or missing keys, not exactly two distinct factor names, a level
            other than 0/1 or of the wrong length, a name that is not a variant of the grid, or a
            combination missing or given twice.
    """
    if not isinstance(table, dict):
        raise ValueError(f"{where}: factorial: must be a table with keys factors and levels, got {table!r}")
    for key in table:
        if key not in FACTORIAL_KEYS:
            allowed = "; ".join(f"{k} ({d})" for k, d in FACTORIAL_KEYS.items())
            raise ValueError(f"{where}: factorial.{key}: unknown key; allowed keys: {allowed}")
    for key in FACTORIAL_KEYS:
        if key not in table:
            raise ValueError(f"{where}: factorial.{key}: missing; {FACTORIAL_KEYS[key]}")
    factors = _factors(table["factors"], where)
    levels = _levels(table["levels"], variants, where)
    return Factorial(factors, levels)


def _factors(value: Any, where: str) -> tuple[str, str]:
    ok = isinstance(value, list) and all(isinstance(f, str) and f.strip() for f in value)
    if not ok or len(value) != N_FACTORS or len(set(value)) != N_FACTORS:
        raise ValueError(
            f"{where}: factorial.factors: {value!r}; allowed: {N_FACTORS} distinct non-empty names "
            f"(a 2 x 2 design), e.g. [\"offset\", \"decoupled_v\"]"
        )
    return (value[0], value[1])


def _levels(
    value: Any, variants: dict[str, str] | None, where: str
) -> tuple[tuple[str, tuple[int, int]], ...]:
    if not isinstance(value, dict):
        raise ValueError(
            f"{where}: factorial.levels: must be a table of variant = [level, level], got {value!r}"
        )
    out: list[tuple[str, tuple[int, int]]] = []
    for variant, lv in value.items():
        key = f"factorial.levels.{variant}"
        if variants is not None and variant not in variants:
            raise ValueError(
                f"{where}: {key}: {variant!r} is not a variant of the grid; [variants]: {', '.join(variants)}"
            )
        bad = not isinstance(lv, list) or len(lv) != N_FACTORS
        if bad or any(isinstance(x, bool) or x not in (0, 1) for x in lv):
            raise ValueError(
                f"{where}: {key}: {lv!r}; allowed: one level per factor, each 0 or 1, e.g. [1, 0]"
            )
        combo = (int(lv[0]), int(lv[1]))
        twice = next((v for v, c in out if c == combo), None)
        if twice is not None:
            raise ValueError(
                f"{where}: {key}: combination {list(combo)} is already {twice!r}; each combination exactly once"
            )
        out.append((variant, combo))
    missing = [list(c) for c in itertools.product((0, 1), repeat=N_FACTORS) if c not in {c for _, c in out}]
    if missing:
        raise ValueError(
            f"{where}: factorial.levels: no variant at combination(s) {missing}; each of the 4 combinations "
            "exactly once"
        )
    return tuple(out)
