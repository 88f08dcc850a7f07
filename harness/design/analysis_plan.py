"""The analysis plan: a grid's ``[analysis]`` table (DESIGN section 6, section 8 for ``looks``).

The plan is fixed before the runs. ``harness queue`` checks the table (unknown keys and
out-of-range values are refused naming the key), stores it in every queued run's config
under ``"analysis"`` (not part of the protocol hash), and refuses to re-queue a grid
whose plan changed after its runs were queued. The report reads it back from the runs
(:func:`plan_from_configs`) and prints it::

    [analysis]
    alpha = 0.05               # level of every test and interval (0 < alpha < 0.5)
    reproduce_fraction = 0.5   # rho of the reproduction contrast (0 < rho < 1)
    min_effect_nats = 0.01     # smallest gain worth detecting, nats/token (> 0; no default)
    power = 0.8                # target power of MDE / seeds-needed (0 < power < 1)
    max_seeds = 30             # most seeds a cell may get (>= 3)
    looks = [3, 5, 10]         # seed counts at which the report may be read (increasing); alpha is
                               # spent over them (harness.report.stats.looks), which needs alpha < 0.3173
    min_multiplier = 1.05      # smallest compute/time multiplier of interest (> 1; DESIGN section 14)

A grid's ``[factorial]`` table (:mod:`harness.design.factorial`, DESIGN section 12) is part of the plan:
stored beside it under ``"factorial"`` and fixed before the runs like the rest.

This module imports from ``harness`` only :mod:`harness.design.factorial` (which imports nothing from it):
``harness.scheduling.grids.grid`` imports it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass, replace
from typing import Any

from harness.design.factorial import Factorial, parse_factorial

# 2 (1 - Phi(1)): above it the looks' spent increments no longer grow with the level
# (harness.report.stats.looks); tests/stats/test_looks.py pins the value
LOOKS_MAX_ALPHA = 0.31731050786291415
MIN_SEEDS = 3  # a test needs at least 3 pairs (DESIGN section 6: "established when n >= 3")

# key -> what it holds (shown in "unknown key" errors)
PLAN_KEYS = {
    "alpha": "level of every test, 0 < alpha < 0.5 (default 0.05)",
    "reproduce_fraction": "rho of the reproduction contrast, 0 < rho < 1 (default 0.5)",
    "min_effect_nats": "smallest gain worth detecting, nats/token, > 0 (no default)",
    "power": "target power, 0 < power < 1 (default 0.8)",
    "max_seeds": f"most seeds a cell may get, an integer >= {MIN_SEEDS} (default 30)",
    "looks": f"increasing seed counts >= {MIN_SEEDS} and <= max_seeds at which the report may be read",
    "min_multiplier": "smallest compute or time multiplier of interest, > 1 (default 1.05, DESIGN section 14)",
}
DEFAULT_MIN_MULTIPLIER = 1.05


@dataclass(frozen=True, slots=True)
class AnalysisPlan:
    """The fixed analysis plan of one grid (DESIGN section 6).

    Attributes:
        alpha: level of every test (one-sided for the headline, two-sided elsewhere).
        reproduce_fraction: rho in ``e = c - (1 - rho) p - rho t``.
        min_effect_nats: smallest gain worth detecting (nats/token), None when not set;
            seeds-needed figures need it.
        power: target power of the MDE and seeds-needed figures.
        max_seeds: cap of seeds-needed ("not reachable at this budget" above it).
        looks: seed counts at which the report may be read (section 8); empty = one look.
        source: where the plan came from (``[analysis]``, ``defaults``, ``given``).
        factorial: the grid's ``[factorial]`` design (DESIGN section 12), None without one.
        min_multiplier: the smallest compute or time multiplier of interest (DESIGN section 14): below it
            "pays for its cost" is answered no.
    """

    alpha: float = 0.05
    reproduce_fraction: float = 0.5
    min_effect_nats: float | None = None
    power: float = 0.8
    max_seeds: int = 30
    looks: tuple[int, ...] = ()
    source: str = "defaults"
    factorial: Factorial | None = None
    min_multiplier: float = DEFAULT_MIN_MULTIPLIER

    def as_config(self) -> dict[str, Any]:
        """The JSON-able dict stored in each run's config under ``"analysis"`` (no ``source``;
        ``factorial`` only when the grid has one, ``min_multiplier`` only when not the default, so older
        stored plans stay equal)."""
        out = asdict(self)
        out.pop("source")
        out.pop("factorial")
        if self.min_multiplier == DEFAULT_MIN_MULTIPLIER:
            out.pop("min_multiplier")
        out["looks"] = list(self.looks)
        if self.factorial is not None:
            out["factorial"] = self.factorial.as_config()
        return out


def _number(where: str, key: str, value: Any, *, integer: bool = False) -> float:
    ok = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, ok):
        kind = "an integer" if integer else "a number"
        raise ValueError(f"{where}: analysis.{key}: {value!r} is not {kind}; allowed: {PLAN_KEYS[key]}")
    if not math.isfinite(value):
        raise ValueError(f"{where}: analysis.{key}: {value!r} must be finite; allowed: {PLAN_KEYS[key]}")
    return value


def parse_plan(table: Any, *, where: str = "<grid>", source: str = "[analysis]") -> AnalysisPlan:
    """Check a ``[analysis]`` table and build an :class:`AnalysisPlan`.

    Args:
        table: the parsed TOML table (a dict), or a run config's stored ``"analysis"`` dict
            (``min_effect_nats`` may then be None).
        where: the file it came from, for messages.

    Raises:
        ValueError: not a table, an unknown key, a wrong type, or a value out of range
            (alpha outside (0, 0.5), reproduce_fraction or power outside (0, 1),
            min_effect_nats <= 0, max_seeds < 3, looks not increasing, below 3 or above
            max_seeds). The message names the file and the key: ``FILE: analysis.KEY: ...``.
    """
    if not isinstance(table, dict):
        raise ValueError(f"{where}: analysis: must be a table of plan settings, got {type(table).__name__}")
    unknown = [k for k in table if k not in PLAN_KEYS]
    if unknown:
        allowed = "; ".join(f"{k} ({d})" for k, d in PLAN_KEYS.items())
        raise ValueError(f"{where}: analysis.{unknown[0]}: unknown key; allowed keys: {allowed}")
    d = AnalysisPlan()
    alpha = _number(where, "alpha", table.get("alpha", d.alpha))
    if not 0 < alpha < 0.5:
        raise ValueError(f"{where}: analysis.alpha: {alpha!r} is out of range; allowed: {PLAN_KEYS['alpha']}")
    rho = _number(where, "reproduce_fraction", table.get("reproduce_fraction", d.reproduce_fraction))
    if not 0 < rho < 1:
        raise ValueError(
            f"{where}: analysis.reproduce_fraction: {rho!r} is out of range; allowed: "
            f"{PLAN_KEYS['reproduce_fraction']}"
        )
    power = _number(where, "power", table.get("power", d.power))
    if not 0 < power < 1:
        raise ValueError(f"{where}: analysis.power: {power!r} is out of range; allowed: {PLAN_KEYS['power']}")
    min_effect = table.get("min_effect_nats")
    if min_effect is not None:
        min_effect = _number(where, "min_effect_nats", min_effect)
        if not min_effect > 0:
            raise ValueError(
                f"{where}: analysis.min_effect_nats: {min_effect!r} must be > 0 "
                "(a gain size in nats/token, e.g. 0.01)"
            )
    max_seeds = int(_number(where, "max_seeds", table.get("max_seeds", d.max_seeds), integer=True))
    if max_seeds < MIN_SEEDS:
        raise ValueError(
            f"{where}: analysis.max_seeds: {max_seeds} is out of range; allowed: {PLAN_KEYS['max_seeds']}"
        )
    looks = table.get("looks", [])
    if not isinstance(looks, (list, tuple)):
        raise ValueError(f"{where}: analysis.looks: {looks!r} must be a list of seed counts, e.g. [3, 5, 10]")
    looks = tuple(int(_number(where, "looks", k, integer=True)) for k in looks)
    for prev, k in zip((None, *looks), looks):
        if k < MIN_SEEDS or k > max_seeds:
            raise ValueError(
                f"{where}: analysis.looks: {k} is out of range; allowed: {PLAN_KEYS['looks']} "
                f"(max_seeds = {max_seeds})"
            )
        if prev is not None and k <= prev:
            raise ValueError(
                f"{where}: analysis.looks: {list(looks)} is not increasing ({k} after {prev}); "
                "allowed: strictly increasing seed counts, e.g. [3, 5, 10]"
            )
    if looks and not alpha < LOOKS_MAX_ALPHA:
        raise ValueError(
            f"{where}: analysis.alpha: {alpha!r} is too large for sequential looks; allowed with "
            f"looks: alpha < {LOOKS_MAX_ALPHA:.4f} (harness/report/stats/looks.py: above it the spent "
            "increments no longer grow with the level)"
        )
    min_mult = _number(where, "min_multiplier", table.get("min_multiplier", d.min_multiplier))
    if not min_mult > 1:
        raise ValueError(
            f"{where}: analysis.min_multiplier: {min_mult!r} is out of range; allowed: {PLAN_KEYS['min_multiplier']}"
        )
    return AnalysisPlan(
        float(alpha),
        float(rho),
        None if min_effect is None else float(min_effect),
        float(power),
        max_seeds,
        looks,
        source,
        min_multiplier=float(min_mult),
    )


def plan_diff(old: dict | None, new: dict) -> list[str]:
    """``"analysis.KEY: old != new"`` for every plan key whose stored value differs.

    ``old`` None (a run queued without a stored plan) differs in every key.
    """
    old = old if isinstance(old, dict) else {}
    return [
        f"analysis.{k}: {old.get(k, '<absent>')!r} != {new.get(k, '<absent>')!r}"
        for k in (*PLAN_KEYS, "factorial")
        if old.get(k, "<absent>") != new.get(k, "<absent>")
    ]


def plan_from_configs(configs: Iterable[str | dict | None]) -> AnalysisPlan:
    """The plan stored with a grid's runs (``runs.config`` JSON strings or dicts).

    Runs without a stored plan (ad-hoc runs, or queued before plans were stored) are
    ignored; when no run has one, the defaults are returned with ``source="defaults"``.

    Raises:
        ValueError: the runs carry different plans (the message names the keys), or a
            stored plan is invalid.
    """
    plans: dict[str, dict] = {}
    for cfg in configs:
        try:
            cfg = json.loads(cfg) if isinstance(cfg, str) else cfg
        except json.JSONDecodeError:
            continue
        stored = cfg.get("analysis") if isinstance(cfg, dict) else None
        if isinstance(stored, dict):
            plans.setdefault(json.dumps(stored, sort_keys=True), stored)
    if not plans:
        return AnalysisPlan(source="defaults")
    if len(plans) > 1:
        first, *rest = plans.values()
        diff = sorted({line for other in rest for line in plan_diff(first, other)})
        raise ValueError(
            f"the runs carry {len(plans)} different analysis plans ({'; '.join(diff)}); a grid's "
            "plan is fixed before its runs: report each plan's runs as their own grid"
        )
    (stored,) = plans.values()
    stored = dict(stored)
    factorial = stored.pop("factorial", None)
    plan = parse_plan(stored, where="runs.config", source="stored with the runs")
    if factorial is None:
        return plan
    return replace(plan, factorial=parse_factorial(factorial, where="runs.config"))
