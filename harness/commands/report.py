"""Write the paired significance report of a grid (stats.csv, report.md, report.html, figures).

Pairs each variant's finished runs with the parent's by seed (same size, budget and
protocol hash) and applies the grid's analysis plan (its [analysis] table, stored with
its runs; DESIGN 6) per size and budget: descriptives of every comparison (95 % t
interval, exact sign-flip, Wilcoxon and sign tests); the headline as gatekeeper (one-sided
t-test of treatment - parent; `gain established`, `gain absent (< min_effect_nats)` or
`undecided`, both tests of every cell in one family across the cells); where the gain is
established, a verdict per control from its reproduction contrast (Holm over every assessed
(cell, control) contrast of the grid) with the fraction of the gain it reproduces (Fieller
interval); elsewhere `not assessed`; degenerate controls `invalid: degenerate`. Also the A/A check, the divergence table, MDE and seeds needed for
the planned effect, and a mixed model nll ~ variant + (1 | seed) as a cross-check; with
several budgets, gain vs budget (table, figure, slope of d per doubling of the budget).
With looks in the plan (DESIGN 8) each cell is tested at the look its seeds reach, at that
look's share of alpha ("look k of K, level x"); `harness topup` adds seeds where undecided.
Failed, diverged and unfinished runs are listed; a seed where one side diverged counts as a
loss for that side (worst-case imputation), never as a dropped pair. The run queue
(--storage, default RESULTS/queue.journal) is read for the runs still queued or running:
the report says how many of the grid's runs are done, and that its verdicts use those
only; without a queue it says the queue was not found.

Files written to OUT (default RESULTS/reports/GRID/): stats.csv, pairs.csv, report.md,
report.html (self-contained) and figures/*.png; with --single-file only report.html. A results folder this process cannot write
(a read-only mount) is read without ingesting anything (a note says so); give --out DIR.

example:
  harness report --grid rd_controls_small
  harness report --grid rd_controls_small --results /shared/results --out /tmp/report --allow-partial
  harness report --grid rd_controls_small --single-file --out /tmp/rd_report
"""

from __future__ import annotations

import argparse
import os
import warnings
from pathlib import Path

from harness.commands.options import add_storage, open_queue
from harness.common import console


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``harness report``."""
    parser.add_argument("--grid", required=True, metavar="NAME", help="grid name (the `name` in its TOML)")
    parser.add_argument(
        "--out", type=Path, default=None, metavar="DIR", help="output folder (default: RESULTS/reports/NAME/)"
    )
    add_storage(parser, reads_only=True)
    parser.add_argument(
        "--allow-partial",
        action="store_true",
        help="leave out (with a warning) pairs whose protocol hashes differ and "
        "duplicated runs, instead of stopping with an error",
    )
    parser.add_argument("--no-figures", action="store_true", help="skip the PNG figures (tables only)")
    parser.add_argument(
        "--single-file",
        action="store_true",
        help="write only report.html, one self-contained file (figures embedded), to attach "
        "to a pull request or an e-mail",
    )


def report_where(storage: str | None, results: Path) -> str:
    """Where the queue is, as a report prints it: never this machine's absolute path (a checked-in
    report names no home folder or mount). A journal in the results folder: its path there (``queue.journal
    in the results folder``); a journal elsewhere: its file name; a database: its URL without the password."""
    from harness.scheduling.queue.storage import describe_storage, parse_storage

    kind, where = parse_storage(storage, results)
    if kind != "journal":
        return describe_storage(storage, results)
    path = Path(os.path.abspath(where))
    try:
        return f"{path.relative_to(os.path.abspath(results)).as_posix()} in the results folder"
    except ValueError:
        return f"{path.name} (a journal outside the results folder)"


def _queue_view(args: argparse.Namespace):
    """``({run_id: QueuedRun}, where)`` of the grid from the run queue, or ``(None, why not)``."""
    from harness.report.stats.pairing import cell_size
    from harness.report.stats.progress import QueuedRun

    where = report_where(args.storage, args.results)
    try:
        queue = open_queue(args)
        if queue is None:
            return None, f"no queue at {where}"
        runs = queue.runs(args.grid)
    except ConnectionError as exc:  # the report still builds from the store, and says why
        return None, f"queue unreachable: {exc}"
    if not runs:
        return None, f"no runs of grid {args.grid!r} in the queue at {where}"
    return {
        rid: QueuedRun(
            r.state,
            r.config.variant,
            r.config.role,
            r.config.seed,
            cell_size(r.config.size, r.config.axes),  # the report's cell of a grid with [axes]
            r.config.budget_tokens,
            r.error,
        )
        for rid, r in runs.items()
    }, f"read from {where}"


def _writable_folder(out: Path) -> Path | None:
    """Make ``out`` (and its missing parents) before the work, so an unwritable one fails early;
    returns the outermost folder made (``None``: it existed).

    Raises:
        ValueError: ``out`` cannot be made or written, naming it and ``--out``.
    """
    missing = [p for p in (out, *out.parents) if not p.exists()]
    try:
        out.mkdir(parents=True, exist_ok=True)
        if not os.access(out, os.W_OK):
            raise PermissionError(13, "not writable", str(out))
    except OSError as exc:
        raise ValueError(
            f"cannot write the report to {out} ({exc.strerror or exc}); pass --out DIR (a writable folder)"
        ) from None
    return missing[-1] if missing else None


def _remove_empty(out: Path, made: Path | None) -> None:
    """Remove the folders :func:`_writable_folder` made, up to ``made``, where still empty."""
    if made is None:
        return
    for folder in (out, *out.parents):
        try:
            folder.rmdir()
        except OSError:
            return
        if folder == made:
            return


def missing_files_note(store, runs) -> str | None:
    """A sentence naming the grid's runs the store holds but whose result file is gone (deleted
    after ingest), else ``None``: the store is then their only record, and a rebuild of the
    database from ``runs/`` would drop them (the report's counts and verdict would change)."""
    gone = sorted(r for r in runs["run_id"].to_list() if not store.result_path(r).is_file())
    if not gone:
        return None
    shown = ", ".join(gone[:5]) + (f" and {len(gone) - 5} more" if len(gone) > 5 else "")
    return (
        f"{len(gone)} of {runs.height} runs in the results database have no result file in "
        f"the results folder's {store.runs_dir.name}/ ({shown}): the database is their only record, and a rebuild from the "
        "result files would leave them out"
    )


def unreadable_files_note(store, unreadable, grid: str) -> str | None:
    """A sentence naming the grid's result files in ``runs/`` that cannot be read (truncated,
    damaged, another schema: ``unreadable``, the store's ``ingest_log`` rows with an error), else
    ``None``: their runs are in no table and count as not finished, as `status` and `sql` say.
    A file is the grid's when its run id (the file name) starts with ``GRID:``
    (:func:`harness.common.terms.run_id`)."""
    from harness.report.stats.progress import unreadable_run_ids

    bad = sorted(
        (rid, why) for rid, why in unreadable_run_ids(unreadable).items() if rid.startswith(f"{grid}:")
    )
    if not bad:
        return None
    shown = "; ".join(f"{store.result_path(rid).name}: {why}" for rid, why in bad[:5])
    return (
        f"{len(bad)} result file(s) of grid {grid} in {store.runs_dir} cannot be read ({shown}"
        + (f"; and {len(bad) - 5} more" if len(bad) > 5 else "")
        + "): their runs do not count as finished (fix or remove the files)"
    )


def main(args: argparse.Namespace) -> int:
    """Build the report of ``args.grid`` from the store in ``args.results``; prints paths and headline."""
    console.phase(
        "loading the statistics and plotting libraries (polars, scipy, statsmodels, matplotlib) ..."
    )
    from harness.common.terms import check_grid_name
    from harness.report.build import build_report, load_frames
    from harness.report.render.sections import summary_lines
    from harness.store.store import Store  # imported here: the report core works on frames without db

    check_grid_name(args.grid, "--grid")  # RESULTS/reports/NAME/ stays inside the results folder
    out = args.out if args.out is not None else args.results / "reports" / args.grid
    made = _writable_folder(out)
    store = Store(args.results)
    console.phase(f"reading grid {args.grid} from the results store in {args.results} ...")
    try:
        with warnings.catch_warnings():  # the report lists unreadable result files itself
            warnings.filterwarnings("ignore", message="skipping result file")
            frames = load_frames(store, args.grid)
    except BaseException:
        _remove_empty(out, made)  # `--grid nosuch` leaves no empty reports/nosuch/
        raise
    notes = tuple(
        n
        for n in (
            missing_files_note(store, frames.runs),
            unreadable_files_note(store, frames.unreadable, args.grid),
        )
        if n
    )
    note = getattr(store, "last_ingest_skipped", None)  # why new result files were not ingested, if so
    if note:
        print(f"note: {note}")
    queue, queue_note = _queue_view(args)
    result = build_report(
        frames,
        out,
        grid=args.grid,
        allow_partial=args.allow_partial,
        figures=not args.no_figures,
        queue=queue,
        queue_note=queue_note,
        single_file=args.single_file,
        notes=notes,
        say=console.phase,
    )
    for w in result.stats.warnings:
        print(f"warning: {w}")
    for p in result.paths:
        print(p)
    print()
    print("\n".join(summary_lines(result.stats)))
    return 0
