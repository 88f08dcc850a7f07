"""``harness plan``'s text: the plan, where the sd and the throughput came from, the table of MDE, seeds
needed and cost per comparison and cell (computed by :mod:`harness.report.stats.seed_planning`)."""

from __future__ import annotations

import math

from harness.report.stats.looks import look_at
from harness.report.stats.pairing import split_cell_size
from harness.report.stats.seed_planning import GIVEN, INTERACTION, GridShape, PlanRow, Throughput, sd_interval


def _f(x: float | None, fmt: str) -> str:
    return "-" if x is None or (isinstance(x, float) and not math.isfinite(x)) else format(x, fmt)


def render_plan(
    shape: GridShape, rows: list[PlanRow], speed: dict[str, Throughput], *, sd_note: str
) -> list[str]:
    """The plan as text lines: the plan, where the sd and the throughput came from, the table, notes."""
    p = shape.plan
    looks = f"looks {list(p.looks)}" if p.looks else "no looks (read once at alpha)"
    lines = [
        f"grid {shape.name}: {shape.n_seeds} seeds per cell; alpha {p.alpha:g} (headline one-sided, contrasts "
        f"two-sided), power {p.power:g}, min_effect_nats "
        f"{_f(p.min_effect_nats, '.4g') if p.min_effect_nats else 'not set'}, rho {p.reproduce_fraction:g}, "
        f"max_seeds {p.max_seeds}, {looks}",
        f"paired sd: {sd_note}",
    ]
    if p.looks:
        lk = look_at(shape.n_seeds, p.looks, p.alpha)
        lines.append(
            f"the grid's {shape.n_seeds} seeds are "
            + (
                f"before the first look ({p.looks[0]}): no MDE until then"
                if lk.before_first
                else f"look {lk.k} of {lk.n_looks} (its {lk.n} seeds tested at level {lk.level:.3g})"
            )
            + "; seeds needed are looks, each at its own level"
        )
    for size in dict.fromkeys(
        split_cell_size(s)[0] for s, _, _ in shape.cells
    ):  # a size once, whatever its axes
        t = speed.get(size)
        lines.append(
            f"throughput, size {size}: "
            + (
                f"{t.tokens_per_s:,.0f} tokens/s per worker, from {t.source}"
                if t and t.tokens_per_s
                else "unknown (no finished run of this size in the store and no "
                f"harness bench row; run `harness bench --size {size}`)"
            )
        )
    for size, budget, variants in shape.cells:
        t = speed.get(size)
        runs = len(variants) * shape.n_seeds
        hours = f", {runs * budget / t.tokens_per_s / 3600:.1f} worker-hours" if t and t.tokens_per_s else ""
        lines.append(
            f"cell {size}/{budget:_} as written: {len(variants)} variants x {shape.n_seeds} seeds = {runs} "
            f"runs, {runs * budget:_} tokens{hours}"
        )
    if p.min_effect_nats is None:
        lines.append(
            "min_effect_nats is not set in the grid's [analysis]: no seeds needed or cost, only the MDE "
            "(set it to the smallest gain worth detecting, e.g. min_effect_nats = 0.01)"
        )
    return lines + _table(shape, rows)


def _table(shape: GridShape, rows: list[PlanRow]) -> list[str]:
    """The rows as an aligned table, then what its columns mean, the sd sources and how rough each sd is."""
    p = shape.plan
    lines: list[str] = []
    head = (
        "comparison",
        "size",
        "budget",
        "sd",
        "MDE",
        "effect",
        "seeds needed",
        "runs",
        "tokens",
        "worker-hours",
    )
    table = [head]
    for r in rows:
        if r.planned_effect_nats is None:
            needed = "-"
        elif r.reachable:
            needed = str(r.seeds_needed)
        elif r.sd_nats is None:
            needed = "unknown sd"
        else:
            needed = (
                f"not reachable at this budget (power {r.power_at_max:.2f} at "
                f"{'the last look' if p.looks else 'max_seeds'} {p.looks[-1] if p.looks else p.max_seeds})"
            )
        table.append(
            (
                r.comparison,
                r.size,
                f"{r.budget_tokens:_}",
                _f(r.sd_nats, ".4f"),
                _f(r.mde_nats, ".4f"),
                _f(r.planned_effect_nats, ".4g"),
                needed,
                _f(r.runs, "d"),
                _f(r.tokens, "_d"),
                _f(r.est_hours, ".1f"),
            )
        )
    widths = [max(len(row[i]) for row in table) for i in range(len(head))]
    lines.append("")
    lines += [
        "  ".join(
            c.ljust(w) if i in (0, 1, 6) else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))
        ).rstrip()
        for row in table
    ]
    lines += [
        "",
        "MDE: the smallest true |mean| (nats/token) the grid's seeds detect with the plan's power "
        f"({'at their look' if p.looks else 'at alpha'}). effect: min_effect_nats for the headline "
        "(and for showing the gain absent, < min_effect_nats, when the true gain is 0), "
        f"min(rho, 1 - rho) x min_effect_nats for a contrast. runs, tokens, worker-hours: every variant "
        "of the cell at the seeds needed, at the measured throughput of one worker (divide by the workers).",
    ]
    if any(r.kind == INTERACTION for r in rows):
        lines.append(
            "interaction (a [factorial] grid): two-sided, effect min_effect_nats (one factor's gain absorbed by "
            "the other). Without a factorial pilot its sd is sqrt(2) x one difference's (independent run noise: "
            "Var I = 4 sigma^2): an interaction needs about 4x the seeds of a main effect, 2x those of a single "
            "difference, for the same size."
        )
    sources = list(dict.fromkeys(r.sd_source for r in rows if r.sd_source != GIVEN))
    if sources:
        lines += ["sd sources:"] + [f"  {s}" for s in sources]
    for df in sorted({r.sd_df for r in rows if r.sd_df}):
        lo, hi = sd_interval(df)
        lines.append(
            f"an sd with {df} degrees of freedom is rough: the true sd lies between {lo:.2f} and {hi:.2f} "
            "times it (80 % chi-square interval); seeds needed and cost grow roughly with its square"
        )
    return lines


__all__ = ["render_plan"]
