"""Write the factorial grid that separates a treatment's change from a control's (DESIGN section 12).

When a control reproduces the treatment's gain and does better than it (gain fraction interval
above 1, as `harness report` says), the next question is whether the treatment's change still
helps on top of the control's, or whether the control absorbs it (an interaction). This writes a
2 x 2 factorial grid, never queues it: parent (0, 0), CONTROL (1, 0), treatment (0, 1) and the
shipped composed variant = the treatment with the control's additions (1, 1) (for param_matched:
rd_offset); the [factorial] table; the source grid's [train] protocol, corpus, sizes and budgets;
and an [analysis] plan from the source grid's own runs in the store: the interaction's paired sd
(sqrt(sd(t - p)^2 + sd(c - p)^2)), looks at n/2 and n seeds with n the seeds the interaction
needs for min_effect_nats (two-sided, noncentral t), and a header with the arithmetic and the cost
at the store's measured tokens/s. The grid's name is the file name without .toml.

Where the source's headline is not `gain established` in a planned cell, a `note:` line says so
and that the follow-up then tests whether the treatment's change helps on top of the control's.

Refuses in one line: an existing --out file (never overwritten), an unknown grid, CONTROL not a
control of the grid, no cell with >= 3 finished seeds of parent, treatment and control, or no
composed spec for the pair (write one in controls/, see controls/rd_offset.toml).

example:
  harness followup --grid rd_cpu_study --absorb param_matched --out ablations/rd_cpu_followup.toml
  harness queue ablations/rd_cpu_followup.toml && harness work
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--grid", required=True, metavar="NAME", help="the source grid (its runs in the store)"
    )
    parser.add_argument(
        "--absorb", required=True, metavar="CONTROL", help="the control that may absorb the treatment's gain"
    )
    parser.add_argument("--out", required=True, type=Path, metavar="FILE.toml", help="the grid file to write")


def _check_out(out: Path) -> None:
    if out.suffix != ".toml":
        raise ValueError(f"--out {out}: must be a .toml file (its name without .toml is the grid's name)")
    if out.exists():
        raise ValueError(f"--out {out}: exists; followup never overwrites a file (give a new file name)")
    if not out.parent.is_dir():
        raise ValueError(f"--out {out}: folder {out.parent} does not exist")


def _train(store, grid: str, variants: tuple[str, ...]) -> tuple[str, dict]:
    """(corpus, variant -> [train] overrides) from each variant's first finished untuned run's config."""
    runs = store.query(
        "SELECT variant, config FROM runs WHERE grid = ? AND status = 'done' ORDER BY run_id", [grid]
    )
    corpus, train = "", {}
    for variant, config in runs.iter_rows():
        cfg = json.loads(config) if isinstance(config, str) else dict(config)
        if variant in variants and variant not in train and not cfg.get("tuned"):
            axes = (
                cfg.get("axes") or {}
            )  # an axis value is its cell's, not a fixed setting: the follow-up sweeps it
            train[variant] = {k: v for k, v in (cfg.get("train") or {}).items() if k not in axes}
            corpus = corpus or cfg["corpus"]
    return corpus, train


def _refuse_pair(stats, args, cells, composed) -> None:
    """One line for each reason the pair cannot be followed up."""
    if stats.treatment is None:
        raise ValueError(f"grid {args.grid}: has no treatment, so there is no gain to separate")
    if args.absorb not in stats.controls:
        raise ValueError(
            f"--absorb {args.absorb}: not a control of grid {args.grid}; its controls: "
            + (", ".join(stats.controls) or "none")
        )
    if not cells:
        raise ValueError(
            f"grid {args.grid}: no finished runs to plan from: no cell has >= 3 seeds where {stats.parent}, "
            f"{stats.treatment} and {args.absorb} all finished"
        )
    if composed is None:
        raise ValueError(
            f"--absorb {args.absorb}: no composed variant = {stats.treatment} with {args.absorb}'s additions "
            f"ships (a spec with base = {stats.treatment!r} adding exactly what {args.absorb} adds to "
            f"{stats.parent}); write one in controls/ (see controls/rd_offset.toml) and run again"
        )


def main(args: argparse.Namespace) -> int:
    # lazy: DuckDB, polars and the report's statistics load only when the command runs (`--help` stays light)
    import tomllib

    from harness.models.catalog import load_specs
    from harness.report import followup as fu
    from harness.report.build import compute_stats, load_frames
    from harness.report.stats.seed_planning import throughput
    from harness.scheduling.grids.grid import parse_grid
    from harness.store.store import Store

    _check_out(args.out)
    store = Store(args.results)
    stats = compute_stats(load_frames(store, args.grid), grid=args.grid)
    cells = fu.cell_sds(stats, args.absorb) if args.absorb in stats.controls else ()
    composed = (
        fu.composed_variant(stats.treatment, args.absorb, stats.parent, load_specs()) if cells else None
    )
    _refuse_pair(stats, args, cells, composed)
    corpus, train = _train(store, args.grid, (stats.parent, stats.treatment, args.absorb))
    src = fu.Source(
        grid=args.grid,
        corpus=corpus,
        parent=stats.parent,
        treatment=stats.treatment,
        control=args.absorb,
        composed=composed,
        train=train,
        cells=tuple((c.size, c.budget_tokens) for c in cells),
        why=fu.why_text(stats, args.absorb),
    )
    fp = fu.plan_followup(cells, stats.plan)
    speed = throughput(
        store.query("SELECT size, status, tokens_seen, budget_tokens, wall_s FROM runs", []),
        store.query("SELECT bench_id, created_at, size, variant, tokens_per_s FROM bench", [], ingest=False),
    )
    text = fu.grid_text(args.out.stem, src, fp, speed)
    parse_grid(
        tomllib.loads(text), path=args.out
    )  # the grid `harness queue` will read: checked before writing
    args.out.write_text(text)
    print(
        f"wrote {args.out}: {stats.parent} (0,0), {args.absorb} (1,0), {stats.treatment} (0,1), {composed} (1,1); "
        f"looks {fp.looks[0]} and {fp.looks[1]} seeds for an interaction of {fp.effect:.4g} nats/token at sd "
        f"{fp.sd:.4g}" + ("" if fp.reachable else " (not reachable: see the file's header)")
    )
    for line in fu.unestablished_lines(stats, cells, args.absorb, composed):
        print(line)
    print(f"not queued; next: harness queue {args.out} && harness work")
    return 0
