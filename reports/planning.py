"""``harness plan``: what a grid can detect before its runs, and what a decision would cost (DESIGN section 8).

Per cell (size, budget) and comparison (the headline treatment - parent, one-sided; each
control's reproduction contrast ``e = c - (1 - rho) p - rho t``, two-sided):

* the **paired sd** (nats/token), the nuisance parameter: from a pilot grid's runs in the
  store, each comparison's sd over the pilot's seeds in the same cell (:func:`pilot_sds`;
  a control the pilot lacks gets the pilot's contrast sds of that cell pooled, df-weighted;
  a budget the pilot lacks gets the pilot's nearest budget of the same size), or one given
  sd for every comparison;
* the **MDE** at the grid's seeds and the plan's power (:func:`reports.power.look_mde`:
  at alpha, or at the level of the look the grid's seeds reach);
* the **seeds needed** for the plan's ``min_effect_nats`` (min(rho, 1 - rho) of it for a
  contrast; :func:`reports.power.planned_seeds`), or "not reachable at this budget";
* the **cost** of running the cell at that many seeds: every variant of the cell (pairs
  need them all, ``harness topup`` adds them all), runs x budget tokens, and worker-hours
  at the measured throughput of that size (:func:`throughput`: the store's finished runs,
  end to end, else ``harness bench``'s Lightning loop, else unknown).

Power by the noncentral t (statsmodels, :mod:`reports.power`). This module reads frames and
the report's statistics only; ``harness/commands/plan.py`` loads the grid and the store.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import polars as pl
import scipy.stats

from reports.looks import look_at
from reports.plan import AnalysisPlan
from reports.power import contrast_effect, look_mde, planned_seeds
from reports.stats import ReportStats

HEADLINE = "headline"
ABSENCE = "absence"  # the headline's absence test (H0: gain >= min_effect_nats), DESIGN 6
CONTRAST = "contrast"
GIVEN = "given (--sd)"
JSON_KEYS = ("comparison", "size", "budget_tokens", "sd_nats", "n_seeds", "mde_nats", "seeds_needed", "reachable",
             "runs", "tokens", "est_hours")


@dataclass(frozen=True, slots=True)
class GridShape:
    """What planning needs to know about a grid (built from :class:`harness.scheduling.grid.Grid`).

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
    kind: str  # HEADLINE, ABSENCE or CONTRAST
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
        row.update(kind=self.kind, level=self.level, sd_source=self.sd_source, sd_df=self.sd_df,
                   planned_effect_nats=self.planned_effect_nats)
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in row.items()}


def _pooled(sds: list[tuple[float, int]]) -> tuple[float, int]:
    """df-weighted pooled sd of ``(sd, df)`` pairs: sqrt(sum df sd^2 / sum df)."""
    df = sum(d for _, d in sds)
    return math.sqrt(sum(d * s * s for s, d in sds) / df), df


def pilot_sds(stats: ReportStats) -> dict[tuple[str, str, int], PilotSd]:
    """Paired sds of a pilot grid's report statistics, by (comparison key, size, budget).

    Keys: ``("headline", size, budget)`` (treatment - parent over all its pairs) and
    ``(control, size, budget)`` (that control's reproduction contrast over the seeds where
    control, parent and treatment all finished). Cells with fewer than 2 pairs give no sd.
    """
    out = {}
    for h in stats.headlines:
        if h.n >= 2 and math.isfinite(h.sd):
            out[(HEADLINE, h.size, h.budget_tokens)] = PilotSd(
                h.sd, f"pilot {stats.grid}: sd of {h.comparison} over {h.n} seeds", h.n - 1)
    for a in stats.assessments:
        if a.n >= 2 and math.isfinite(a.contrast_sd):
            out[(a.control, a.size, a.budget_tokens)] = PilotSd(
                a.contrast_sd, f"pilot {stats.grid}: sd of the {a.control} contrast over {a.n} seeds", a.n - 1)
    return out


def _match(sds: dict[tuple[str, str, int], PilotSd], key: str, size: str, budget: int,
           grid: str) -> PilotSd:
    """The pilot sd for one planned comparison: the same cell, else the pilot's contrasts of that cell
    pooled (a control the pilot lacks), else the nearest budget of the same size."""
    budgets = sorted({b for (_, s, b) in sds if s == size}, key=lambda b: (abs(math.log(b / budget)), b))
    if not budgets:
        return PilotSd(None, f"pilot {grid} has no pairs at size {size}")
    for b in budgets:
        hit = sds.get((key, size, b))
        if hit is None and key != HEADLINE:
            contrasts = [(v.sd, v.df) for (k, s, bb), v in sds.items() if (s, bb) == (size, b) and k != HEADLINE]
            if contrasts:
                sd, df = _pooled(contrasts)
                hit = PilotSd(sd, f"pilot {grid}: {len(contrasts)} control contrasts pooled (no {key} runs)", df)
        if hit is not None:
            where = "" if b == budget else f" at its nearest budget {b:_} tokens (noise may differ at {budget:_})"
            return PilotSd(hit.sd, hit.source + where, hit.df)
    return PilotSd(None, f"pilot {grid} has no {key} pairs at size {size}")


def sd_interval(df: int, conf: float = 0.8) -> tuple[float, float]:
    """Factors (low, high) with P(low <= true sd / sample sd <= high) = conf for a normal sample sd
    with ``df`` degrees of freedom: sqrt(df / chi2_{(1+conf)/2, df}), sqrt(df / chi2_{(1-conf)/2, df})."""
    return (math.sqrt(df / scipy.stats.chi2.ppf((1 + conf) / 2, df)),
            math.sqrt(df / scipy.stats.chi2.ppf((1 - conf) / 2, df)))


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
            out[size] = Throughput(tps, f"harness bench {latest} ({what}; training steps only, evaluations "
                                        "not counted)")
    if runs is not None and runs.height:
        done = runs.filter((pl.col("status") == "done") & (pl.col("wall_s") > 0))
        if done.height:
            tokens = pl.coalesce(pl.col("tokens_seen"), pl.col("budget_tokens")).cast(pl.Float64)
            agg = done.group_by("size").agg(tokens.sum().alias("tokens"), pl.col("wall_s").sum().alias("wall"),
                                            pl.len().alias("n"))
            for size, tok, wall, n in agg.select("size", "tokens", "wall", "n").iter_rows():
                out[size] = Throughput(tok / wall, f"{n} finished runs of size {size} in the store (end to end, "
                                                   "evaluations included)")
    return out


def plan_rows(shape: GridShape, *, sd: float | None = None, pilot: ReportStats | None = None,
              speed: dict[str, Throughput] | None = None) -> list[PlanRow]:
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
    comparisons = ([(HEADLINE, f"{shape.treatment} - {shape.parent}", "one-sided", plan.min_effect_nats)]
                   if shape.treatment else [])
    if shape.treatment and plan.min_effect_nats is not None:
        # Showing the gain absent (< delta) when it is 0: the one-sided test of H0 "gain >= delta" is
        # the headline's test shifted by delta, so it has the same power at the same distance.
        comparisons.append((ABSENCE, f"{shape.treatment} - {shape.parent} (absent, true gain 0)", "one-sided",
                            plan.min_effect_nats))
    comparisons += [(c, f"{c} (contrast)", "two-sided", contrast_effect(plan.min_effect_nats, plan.reproduce_fraction))
                    for c in shape.controls]
    level = look_at(shape.n_seeds, plan.looks, plan.alpha).level
    rows = []
    for size, budget, variants in shape.cells:
        tps = speed.get(size, Throughput(None, "unknown")).tokens_per_s
        for key, label, alternative, effect in comparisons:
            if key not in (HEADLINE, ABSENCE) and key not in variants:
                continue
            got = (PilotSd(sd, GIVEN) if pilot is None
                   else _match(sds, HEADLINE if key == ABSENCE else key, size, budget, pilot.grid))
            mde = look_mde(got.sd, shape.n_seeds, plan, alternative) if got.sd is not None else float("nan")
            need = planned_seeds(effect, got.sd if got.sd is not None else float("nan"), plan, alternative)
            runs = len(variants) * need.n if need.reachable else None
            tokens = runs * budget if runs is not None else None
            hours = tokens / tps / 3600 if tokens is not None and tps else None
            rows.append(PlanRow(label, key if key in (HEADLINE, ABSENCE) else CONTRAST, size, budget, got.sd, got.source,
                                got.df if pilot is not None and got.sd is not None else None, shape.n_seeds, level, None if math.isnan(mde) else mde, effect, need.n,
                                need.reachable, None if math.isnan(need.power_at_max) else need.power_at_max,
                                runs, tokens, hours))
    return rows


def _f(x: float | None, fmt: str) -> str:
    return "-" if x is None or (isinstance(x, float) and not math.isfinite(x)) else format(x, fmt)


def render_plan(shape: GridShape, rows: list[PlanRow], speed: dict[str, Throughput], *, sd_note: str) -> list[str]:
    """The plan as text lines: the plan, where the sd and the throughput came from, the table, notes."""
    p = shape.plan
    looks = f"looks {list(p.looks)}" if p.looks else "no looks (read once at alpha)"
    lines = [f"grid {shape.name}: {shape.n_seeds} seeds per cell; alpha {p.alpha:g} (headline one-sided, contrasts "
             f"two-sided), power {p.power:g}, min_effect_nats "
             f"{_f(p.min_effect_nats, '.4g') if p.min_effect_nats else 'not set'}, rho {p.reproduce_fraction:g}, "
             f"max_seeds {p.max_seeds}, {looks}",
             f"paired sd: {sd_note}"]
    if p.looks:
        lk = look_at(shape.n_seeds, p.looks, p.alpha)
        lines.append(f"the grid's {shape.n_seeds} seeds are "
                     + (f"before the first look ({p.looks[0]}): no MDE until then" if lk.before_first else
                        f"look {lk.k} of {lk.n_looks} (its {lk.n} seeds tested at level {lk.level:.3g})")
                     + "; seeds needed are looks, each at its own level")
    for size in dict.fromkeys(s for s, _, _ in shape.cells):
        t = speed.get(size)
        lines.append(f"throughput, size {size}: " + (f"{t.tokens_per_s:,.0f} tokens/s per worker, from {t.source}"
                                                     if t and t.tokens_per_s else
                                                     "unknown (no finished run of this size in the store and no "
                                                     f"harness bench row; run `harness bench --size {size}`)"))
    for size, budget, variants in shape.cells:
        t = speed.get(size)
        runs = len(variants) * shape.n_seeds
        hours = f", {runs * budget / t.tokens_per_s / 3600:.1f} worker-hours" if t and t.tokens_per_s else ""
        lines.append(f"cell {size}/{budget:_} as written: {len(variants)} variants x {shape.n_seeds} seeds = {runs} "
                     f"runs, {runs * budget:_} tokens{hours}")
    if p.min_effect_nats is None:
        lines.append("min_effect_nats is not set in the grid's [analysis]: no seeds needed or cost, only the MDE "
                     "(set it to the smallest gain worth detecting, e.g. min_effect_nats = 0.01)")
    head = ("comparison", "size", "budget", "sd", "MDE", "effect", "seeds needed", "runs", "tokens", "worker-hours")
    table = [head]
    for r in rows:
        if r.planned_effect_nats is None:
            needed = "-"
        elif r.reachable:
            needed = str(r.seeds_needed)
        elif r.sd_nats is None:
            needed = "unknown sd"
        else:
            needed = (f"not reachable at this budget (power {r.power_at_max:.2f} at "
                      f"{'the last look' if p.looks else 'max_seeds'} {p.looks[-1] if p.looks else p.max_seeds})")
        table.append((r.comparison, r.size, f"{r.budget_tokens:_}", _f(r.sd_nats, ".4f"), _f(r.mde_nats, ".4f"),
                      _f(r.planned_effect_nats, ".4g"), needed, _f(r.runs, "d"),
                      _f(r.tokens, "_d"), _f(r.est_hours, ".1f")))
    widths = [max(len(row[i]) for row in table) for i in range(len(head))]
    lines.append("")
    lines += ["  ".join(c.ljust(w) if i in (0, 1, 6) else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths)))
              .rstrip() for row in table]
    lines += ["", "MDE: the smallest true |mean| (nats/token) the grid's seeds detect with the plan's power "
                  f"({'at their look' if p.looks else 'at alpha'}). effect: min_effect_nats for the headline "
                  "(and for showing the gain absent, < min_effect_nats, when the true gain is 0), "
                  f"min(rho, 1 - rho) x min_effect_nats for a contrast. runs, tokens, worker-hours: every variant "
                  "of the cell at the seeds needed, at the measured throughput of one worker (divide by the workers)."]
    sources = list(dict.fromkeys(r.sd_source for r in rows if r.sd_source != GIVEN))
    if sources:
        lines += ["sd sources:"] + [f"  {s}" for s in sources]
    for df in sorted({r.sd_df for r in rows if r.sd_df}):
        lo, hi = sd_interval(df)
        lines.append(f"an sd with {df} degrees of freedom is rough: the true sd lies between {lo:.2f} and {hi:.2f} "
                     "times it (80 % chi-square interval); seeds needed and cost grow roughly with its square")
    return lines


__all__ = ["GridShape", "PilotSd", "Throughput", "PlanRow", "JSON_KEYS", "pilot_sds", "throughput", "plan_rows",
           "render_plan"]
