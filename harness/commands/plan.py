"""Plan a grid before its runs: per cell and comparison, the MDE at its seeds, the seeds needed and their cost.

For the headline (treatment - parent, one-sided) and each control's reproduction contrast
(two-sided) of every cell: the paired sd used, the minimal detectable effect (MDE,
nats/token) at the grid's seeds and the plan's power, the seeds needed for the plan's
min_effect_nats ("not reachable at this budget" above max_seeds, or past the last look),
and what running the cell at that many seeds costs: runs (every variant of the cell),
tokens and worker-hours at the store's measured throughput of that size (finished runs,
else `harness bench` rows, else unknown). Power by the noncentral t (statsmodels).
With looks in the plan, the MDE is at the look the grid's seeds reach and seeds needed
are looks, each tested at its share of alpha (DESIGN section 8).
A size with one budget has no compute multiplier (DESIGN section 14): the plan prices the parent's runs at
half and twice the budget that would give one; a pilot with several budgets gives the seeds each
comparison needs to detect the plan's min_multiplier.

The paired sd comes from a pilot grid's finished runs in the store (--pilot NAME: each
comparison's sd over the pilot's seeds in the same cell) or is given (--sd NATS, used for
every comparison). --json prints a list of rows with the keys comparison, size,
budget_tokens, sd_nats, n_seeds, mde_nats, seeds_needed, reachable, runs, tokens,
est_hours (seeds_needed null when not reachable), then kind, level, sd_source, sd_df and
planned_effect_nats.

example:
  harness plan ablations/rd_controls_small.toml --pilot rd_controls_small
  harness plan ablations/rd_paper.toml --sd 0.004 --json
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "grid", type=Path, metavar="GRID.toml", help="the grid to plan (see ablations/README.md)"
    )
    parser.add_argument(
        "--pilot",
        metavar="GRID_NAME",
        default=None,
        help="a grid with finished runs in the store whose paired sds to use",
    )
    parser.add_argument(
        "--sd",
        metavar="NATS",
        default=None,
        help="the paired sd (nats/token) to use for every comparison, e.g. 0.006",
    )
    parser.add_argument("--json", action="store_true", help="print the rows as JSON instead of a table")


def _sd(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise ValueError(
            f"--sd {text}: must be a positive number of nats/token (the sd of the paired differences, "
            "e.g. 0.006)"
        )
    return value


def _shape(grid):
    """The grid as :class:`harness.report.stats.seed_planning.GridShape` (A/A checks are no control); a cell of a
    grid with ``[axes]`` is named as the report names it (:func:`harness.report.stats.pairing.cell_size`), so a pilot's
    sd is read from the same axis value."""
    from harness.report.stats.pairing import AA_VARIANTS, cell_size
    from harness.report.stats.seed_planning import GridShape

    by_cell: dict[tuple[str, int], list[str]] = {}
    for c in grid.cells():
        variants = by_cell.setdefault((cell_size(c.size, dict(c.axes)), c.budget_tokens), [])
        if c.variant not in variants:
            variants.append(c.variant)
    treatment = next((v for v, r in grid.variants.items() if r == "treatment"), None)
    controls = tuple(v for v, r in grid.variants.items() if r == "control" and v not in AA_VARIANTS)
    return GridShape(
        grid.name,
        grid.analysis,
        len(grid.seeds),
        grid.parent,
        treatment,
        controls,
        tuple((s, b, tuple(v)) for (s, b), v in by_cell.items()),
    )


def main(args: argparse.Namespace) -> int:
    from harness.report.render.plan_table import render_plan
    from harness.report.stats.multiplier import extra_budget_lines
    from harness.report.stats.pairing import split_cell_size
    from harness.report.stats.seed_planning import plan_rows, throughput
    from harness.scheduling.grids.grid import load_grid

    if args.pilot is not None and args.sd is not None:
        raise ValueError("give either --pilot GRID_NAME or --sd NATS, not both")
    if args.pilot is None and args.sd is None:
        raise ValueError(
            "the plan needs a paired sd: --pilot GRID_NAME (a grid with finished runs in the store, "
            "e.g. a few seeds of this one) or --sd NATS"
        )
    sd = _sd(args.sd) if args.sd is not None else None
    grid = load_grid(args.grid)
    has_store = (args.results / "harness.duckdb").exists() or (args.results / "runs").is_dir()
    pilot, runs, bench = None, None, None
    if has_store:
        from harness.store.store import Store

        store = Store(args.results)
        runs = store.query("SELECT size, status, tokens_seen, budget_tokens, wall_s FROM runs", [])
        bench = store.query(
            "SELECT bench_id, created_at, size, variant, tokens_per_s FROM bench", [], ingest=False
        )
    if args.pilot is not None:
        if not has_store:
            raise FileNotFoundError(
                f"--pilot {args.pilot}: no results store in {str(args.results)!r} (no "
                "harness.duckdb or runs/); set --results DIR or $HARNESS_RESULTS"
            )
        from harness.report.build import compute_stats, load_frames

        pilot = compute_stats(load_frames(store, args.pilot), grid=args.pilot)
    speed = throughput(runs, bench)
    shape = _shape(grid)
    for label, _, _ in shape.cells:  # an axis value's cell trains at its size's measured throughput
        preset = split_cell_size(label)[0]
        if label not in speed and preset in speed:
            speed[label] = speed[preset]
    rows = plan_rows(shape, sd=sd, pilot=pilot, speed=speed)
    if args.json:
        print(json.dumps([r.as_json() for r in rows], indent=2))
        return 0
    note = (
        f"given: {sd:g} nats/token for every comparison"
        if pilot is None
        else f"from pilot grid {args.pilot} in {args.results}: each comparison's sd over the pilot's seeds in the "
        "same cell"
    )
    extra = extra_budget_lines(
        shape.cells, shape.n_seeds, shape.parent, speed, pilot.multipliers if pilot else None, shape.plan
    )
    print("\n".join([*render_plan(shape, rows, speed, sd_note=note), *extra]))
    return 0
