"""``harness plan``: what a grid can detect before its runs, and what a decision would cost (DESIGN section 8).

Per cell (size, budget) and comparison (the headline treatment - parent, one-sided; each
control's reproduction contrast ``e = c - (1 - rho) p - rho t``, two-sided):

* the **paired sd** (nats/token), the nuisance parameter: from a pilot grid's runs in the
  store, each comparison's sd over the pilot's seeds in the same cell (:func:`pilot_sds`;
  a control the pilot lacks gets the pilot's contrast sds of that cell pooled, df-weighted;
  a budget the pilot lacks gets the pilot's nearest budget of the same size), or one given
  sd for every comparison;
* the **MDE** at the grid's seeds and the plan's power (:func:`harness.report.stats.power.look_mde`:
  at alpha, or at the level of the look the grid's seeds reach);
* the **seeds needed** for the plan's ``min_effect_nats`` (min(rho, 1 - rho) of it for a
  contrast; :func:`harness.report.stats.power.planned_seeds`), or "not reachable at this budget";
* for a grid with ``[factorial]`` (DESIGN 12), the **interaction** (two-sided, effect ``min_effect_nats``):
  its sd from a factorial pilot's own interaction rows, else sqrt(2) x the single difference's sd (the
  given one or the pilot's headline; :func:`harness.report.stats.power.interaction_sd`), at alpha / m, Holm's
  first step over the grid's m factorial contrasts (the level the test is sure to have; the row says so);
* the **cost** of running the cell at that many seeds: every variant of the cell (pairs
  need them all, ``harness topup`` adds them all), runs x budget tokens, and worker-hours
  at the measured throughput of that size (:func:`throughput`: the store's finished runs,
  end to end, else ``harness bench``'s Lightning loop, else unknown).

Power by the noncentral t (statsmodels, :mod:`harness.report.stats.power`). This module reads frames and
the report's statistics only; ``harness/commands/plan.py`` loads the grid and the store.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import polars as pl
import scipy.stats

from harness.design.analysis_plan import AnalysisPlan
from harness.report.stats.factorial import MAIN, SPECS
from harness.report.stats.looks import look_at
from harness.report.stats.power import (
    contrast_effect,
    holm_share_plan,
    interaction_sd,
    interaction_seeds,
    look_mde,
    planned_seeds,
)
from harness.report.stats.results import ReportStats

HEADLINE = "headline"
ABSENCE = "absence"  # the headline's absence test (H0: gain >= min_effect_nats), DESIGN 6
CONTRAST = "contrast"
INTERACTION = "interaction"  # a [factorial] grid's interaction contrast, DESIGN 12
FAMILY_PER_CELL = sum(
    spec.kind != MAIN for spec in SPECS
)  # a cell's factorial family: simple effects + interaction
GIVEN = "given (--sd)"
JSON_KEYS = (
    "comparison",
    "size",
    "budget_tokens",
    "sd_nats",
    "n_seeds",
    "mde_nats",
    "seeds_needed",
    "reachable",
    "runs",
    "tokens",
    "est_hours",
)


@dataclass(frozen=True, slots=True)
class GridShape:
    """What planning needs to know about a grid (built from :class:`harness.scheduling.grids.grid.Grid`).

    Attributes:
        name: the grid's name.
        plan: its analysis plan.
        n_seeds: its seeds per cell.
        parent, treatment: variant names (treatment None: no headline).
        controls: real controls (A/A checks excluded: they are in no family).
        cells: ``((size, budget_tokens, variants), ...)``, every variant run at that cell.
    """

    name: str
    plan: AnalysisPlan
    n_seeds: int
    parent: str
    treatment: str | None
    controls: tuple[str, ...]
    cells: tuple[tuple[str, int, tuple[str, ...]], ...]


@dataclass(frozen=True, slots=True)
class PilotSd:
    """A paired sd (nats/token) and where it came from (``df`` = pairs - 1 behind it)."""

    sd: float | None
    source: str
    df: int = 0


@dataclass(frozen=True, slots=True)
class Throughput:
    """Tokens per second of one worker at one size, and where the number came from."""

    tokens_per_s: float | None
    source: str


@dataclass(frozen=True, slots=True)
class PlanRow:
    """One comparison in one cell (see the module docstring). Units: nats/token, tokens, hours."""

    comparison: str
    kind: str  # HEADLINE, ABSENCE, CONTRAST or INTERACTION (a [factorial] grid, DESIGN 12)
    size: str
    budget_tokens: int
    sd_nats: float | None
    sd_source: str
    sd_df: int | None  # degrees of freedom behind a pilot's sd (None: given)
    n_seeds: int
    level: float  # the level the grid's seeds are tested at (alpha, or their look's increment)
    mde_nats: float | None
    planned_effect_nats: float | None
    seeds_needed: int | None
    reachable: bool
    power_at_max: float | None
    runs: int | None
    tokens: int | None
    est_hours: float | None

    def as_json(self) -> dict:
        """The ``--json`` row: :data:`JSON_KEYS` first, then kind, level, sd_source, planned_effect_nats."""
        row = {k: getattr(self, k) for k in JSON_KEYS}
        row.update(
            kind=self.kind,
            level=self.level,
            sd_source=self.sd_source,
            sd_df=self.sd_df,
            planned_effect_nats=self.planned_effect_nats,
        )
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in row.items()}


def _pooled(sds: list[tuple[float, int]]) -> tuple[float, int]:
    """df-weighted pooled sd of ``(sd, df)`` pairs: sqrt(sum df sd^2 / sum df)."""
    df = sum(d for _, d in sds)
    return math.sqrt(sum(d * s * s for s, d in sds) / df), df


def pilot_sds(stats: ReportStats) -> dict[tuple[str, str, int], PilotSd]:
    """Paired sds of a pilot grid's report statistics, by (comparison key, size, budget).

    Keys: ``("headline", size, budget)`` (treatment - parent over all its pairs),
    ``("interaction", size, budget)`` (a factorial pilot's interaction contrast, DESIGN 12) and
    ``(control, size, budget)`` (that control's reproduction contrast over the seeds where
    control, parent and treatment all finished). Cells with fewer than 2 pairs give no sd.
    """
    out = {}
    for h in stats.headlines:
        if h.n >= 2 and math.isfinite(h.sd):
            out[(HEADLINE, h.size, h.budget_tokens)] = PilotSd(
                h.sd, f"pilot {stats.grid}: sd of {h.comparison} over {h.n} seeds", h.n - 1
            )
    for cell in stats.factorial:  # a factorial pilot: its interaction's own sd
        i = next(c for c in cell.contrasts if c.spec.kind == "factorial_interaction")
        if i.n >= 2 and math.isfinite(i.sd):
            out[(INTERACTION, cell.size, cell.budget_tokens)] = PilotSd(
                i.sd, f"pilot {stats.grid}: sd of the interaction over {i.n} seeds", i.n - 1
            )
    for a in stats.assessments:
        if a.n >= 2 and math.isfinite(a.contrast_sd):
            out[(a.control, a.size, a.budget_tokens)] = PilotSd(
                a.contrast_sd, f"pilot {stats.grid}: sd of the {a.control} contrast over {a.n} seeds", a.n - 1
            )
    return out


def _match(sds: dict[tuple[str, str, int], PilotSd], key: str, size: str, budget: int, grid: str) -> PilotSd:
    """The pilot sd for one planned comparison: the same cell, else the pilot's contrasts of that cell
    pooled (a control the pilot lacks), else the nearest budget of the same size."""
    budgets = sorted({b for (_, s, b) in sds if s == size}, key=lambda b: (abs(math.log(b / budget)), b))
    if not budgets:
        return PilotSd(None, f"pilot {grid} has no pairs at size {size}")
    for b in budgets:
        hit = sds.get((key, size, b))
        if hit is None and key != HEADLINE:
            contrasts = [
                (v.sd, v.df) for (k, s, bb), v in sds.items() if (s, bb) == (size, b) and k != HEADLINE
            ]
            if contrasts:
                sd, df = _pooled(contrasts)
                hit = PilotSd(
                    sd, f"pilot {grid}: {len(contrasts)} control contrasts pooled (no {key} runs)", df
                )
        if hit is not None:
            where = (
                "" if b == budget else f" at its nearest budget {b:_} tokens (noise may differ at {budget:_})"
            )
            return PilotSd(hit.sd, hit.source + where, hit.df)
    return PilotSd(None, f"pilot {grid} has no {key} pairs at size {size}")


def sd_interval(df: int, conf: float = 0.8) -> tuple[float, float]:
    """Factors (low, high) with P(low <= true sd / sample sd <= high) = conf for a normal sample sd
    with ``df`` degrees of freedom: sqrt(df / chi2_{(1+conf)/2, df}), sqrt(df / chi2_{(1-conf)/2, df})."""
    return (
        math.sqrt(df / scipy.stats.chi2.ppf((1 + conf) / 2, df)),
        math.sqrt(df / scipy.stats.chi2.ppf((1 - conf) / 2, df)),
    )


def throughput(runs: pl.DataFrame | None, bench: pl.DataFrame | None) -> dict[str, Throughput]:
    """Measured tokens/s per worker for each size (module docstring).

    Args:
        runs: the store's ``runs`` rows (size, status, tokens_seen, budget_tokens, wall_s).
        bench: the store's ``bench`` rows (bench_id, created_at, size, variant, tokens_per_s).

    Returns:
        size -> :class:`Throughput`; sizes with neither are absent.
    """
    out: dict[str, Throughput] = {}
    if bench is not None and bench.height:
        for (size,), rows in bench.filter(pl.col("tokens_per_s").is_finite()).group_by(["size"]):
            latest = rows.sort("created_at").tail(1)["bench_id"][0]
            rows = rows.filter(pl.col("bench_id") == latest)
            loop = rows.filter(pl.col("variant") == "lightning")
            tps = float(loop["tokens_per_s"][0]) if loop.height else float(rows["tokens_per_s"].median())
            what = "its Lightning loop" if loop.height else "median over variants"
            out[size] = Throughput(
                tps, f"harness bench {latest} ({what}; training steps only, evaluations not counted)"
            )
    if runs is not None and runs.height:
        done = runs.filter((pl.col("status") == "done") & (pl.col("wall_s") > 0))
        if done.height:
            tokens = pl.coalesce(pl.col("tokens_seen"), pl.col("budget_tokens")).cast(pl.Float64)
            agg = done.group_by("size").agg(
                tokens.sum().alias("tokens"), pl.col("wall_s").sum().alias("wall"), pl.len().alias("n")
            )
            for size, tok, wall, n in agg.select("size", "tokens", "wall", "n").iter_rows():
                out[size] = Throughput(
                    tok / wall,
                    f"{n} finished runs of size {size} in the store (end to end, evaluations included)",
                )
    return out


def _planned_comparisons(shape: GridShape) -> list[tuple[str, str, str, float | None]]:
    """``(key, label, alternative, planned effect in nats/token)`` of every comparison ``harness plan``
    sizes: the headline, its absence test (with ``min_effect_nats``) and each control's contrast."""
    plan = shape.plan
    comparisons = (
        [(HEADLINE, f"{shape.treatment} - {shape.parent}", "one-sided", plan.min_effect_nats)]
        if shape.treatment
        else []
    )
    if shape.treatment and plan.min_effect_nats is not None:
        # Showing the gain absent (< delta) when it is 0: the one-sided test of H0 "gain >= delta" is
        # the headline's test shifted by delta, so it has the same power at the same distance.
        comparisons.append(
            (
                ABSENCE,
                f"{shape.treatment} - {shape.parent} (absent, true gain 0)",
                "one-sided",
                plan.min_effect_nats,
            )
        )
    comparisons += [
        (c, f"{c} (contrast)", "two-sided", contrast_effect(plan.min_effect_nats, plan.reproduce_fraction))
        for c in shape.controls
    ]
    return comparisons


def plan_rows(
    shape: GridShape,
    *,
    sd: float | None = None,
    pilot: ReportStats | None = None,
    speed: dict[str, Throughput] | None = None,
) -> list[PlanRow]:
    """Every (cell, comparison) row of ``harness plan`` (module docstring).

    Args:
        shape: the planned grid.
        sd: one paired sd for every comparison (``--sd``); or
        pilot: a pilot grid's report statistics (``--pilot``): sds per cell and comparison.
        speed: size -> :class:`Throughput` (:func:`throughput`); sizes absent: wall time unknown.

    Raises:
        ValueError: neither or both of ``sd`` and ``pilot``, or ``sd`` not a positive finite number.
    """
    if (sd is None) == (pilot is None):
        raise ValueError("give exactly one of sd (nats/token) or a pilot grid's statistics")
    if sd is not None and not (math.isfinite(sd) and sd > 0):
        raise ValueError(f"sd {sd!r} must be a positive number of nats/token")
    plan, speed = shape.plan, speed or {}
    sds = pilot_sds(pilot) if pilot is not None else {}
    comparisons = _planned_comparisons(shape)
    level = look_at(shape.n_seeds, plan.looks, plan.alpha).level
    rows = []
    for size, budget, variants in shape.cells:
        tps = speed.get(size, Throughput(None, "unknown")).tokens_per_s
        for key, label, alternative, effect in comparisons:
            if key not in (HEADLINE, ABSENCE) and key not in variants:
                continue
            got = (
                PilotSd(sd, GIVEN)
                if pilot is None
                else _match(sds, HEADLINE if key == ABSENCE else key, size, budget, pilot.grid)
            )
            mde = look_mde(got.sd, shape.n_seeds, plan, alternative) if got.sd is not None else float("nan")
            need = planned_seeds(effect, got.sd if got.sd is not None else float("nan"), plan, alternative)
            runs = len(variants) * need.n if need.reachable else None
            tokens = runs * budget if runs is not None else None
            hours = tokens / tps / 3600 if tokens is not None and tps else None
            rows.append(
                PlanRow(
                    comparison=label,
                    kind=key if key in (HEADLINE, ABSENCE) else CONTRAST,
                    size=size,
                    budget_tokens=budget,
                    sd_nats=got.sd,
                    sd_source=got.source,
                    sd_df=got.df if pilot is not None and got.sd is not None else None,
                    n_seeds=shape.n_seeds,
                    level=level,
                    mde_nats=None if math.isnan(mde) else mde,
                    planned_effect_nats=effect,
                    seeds_needed=need.n,
                    reachable=need.reachable,
                    power_at_max=None if math.isnan(need.power_at_max) else need.power_at_max,
                    runs=runs,
                    tokens=tokens,
                    est_hours=hours,
                )
            )
        rows += _interaction_rows(shape, size, budget, variants, sd, pilot, sds, tps)
    return rows


def _interaction_sd(sd: float | None, pilot, sds: dict, size: str, budget: int) -> PilotSd:
    """The interaction's sd: a pilot's own interaction rows of this size (nearest budget), else sqrt(2) x
    the single difference's sd (the given one, or the pilot's headline; :func:`interaction_sd`)."""
    if pilot is None:
        return PilotSd(interaction_sd(sd), f"sqrt(2) x the given {sd:g} (one difference's sd)")
    own = sorted(
        (b for (k, s, b) in sds if (k, s) == (INTERACTION, size)), key=lambda b: abs(math.log(b / budget))
    )
    if own:
        hit = sds[(INTERACTION, size, own[0])]
        at = "" if own[0] == budget else f" at its nearest budget {own[0]:_} tokens"
        return PilotSd(hit.sd, hit.source + at, hit.df)
    head = _match(sds, HEADLINE, size, budget, pilot.grid)
    if head.sd is None:
        return head
    return PilotSd(
        interaction_sd(head.sd), f"sqrt(2) x the headline's sd ({head.source}): no factorial rows", head.df
    )


def _interaction_rows(shape: GridShape, size, budget, variants, sd, pilot, sds, tps) -> list[PlanRow]:
    """The interaction's row of one cell of a grid with ``[factorial]`` (two-sided, effect ``min_effect_nats``,
    :func:`harness.report.stats.power.interaction_seeds`); [] without a factorial."""
    f, plan = shape.plan.factorial, shape.plan
    if f is None:
        return []
    got = _interaction_sd(sd, pilot, sds, size, budget)
    usable = got.sd if got.sd is not None else float("nan")
    # Holm over the grid's factorial family: priced at its first step (alpha / m), the level it is sure of.
    m = FAMILY_PER_CELL * len(shape.cells)
    plan = holm_share_plan(plan, m)
    mde = look_mde(usable, shape.n_seeds, plan, "two-sided")
    need = interaction_seeds(usable, plan, sd_interaction=usable)
    runs = len(variants) * need.n if need.reachable else None
    tokens = runs * budget if runs is not None else None
    return [
        PlanRow(
            comparison=f"interaction {f.factors[0]} x {f.factors[1]} (at alpha / {m}: Holm over the {m} factorial contrasts)",
            kind=INTERACTION,
            size=size,
            budget_tokens=budget,
            sd_nats=got.sd,
            sd_source=got.source,
            sd_df=got.df if pilot is not None and got.sd is not None else None,
            n_seeds=shape.n_seeds,
            level=look_at(shape.n_seeds, plan.looks, plan.alpha).level,
            mde_nats=None if math.isnan(mde) else mde,
            planned_effect_nats=plan.min_effect_nats,
            seeds_needed=need.n,
            reachable=need.reachable,
            power_at_max=None if math.isnan(need.power_at_max) else need.power_at_max,
            runs=runs,
            tokens=tokens,
            est_hours=tokens / tps / 3600 if tokens is not None and tps else None,
        )
    ]


__all__ = [
    "GridShape",
    "PilotSd",
    "Throughput",
    "PlanRow",
    "JSON_KEYS",
    "pilot_sds",
    "throughput",
    "plan_rows",
]
