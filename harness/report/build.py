"""Build the paired significance report of one grid: frames -> stats -> figures -> files.

Output folder layout (DESIGN section 6)::

    OUT/stats.csv       one row per comparison x size x budget (column contract: harness.report.stats.stats_table.CSV_COLUMNS)
    OUT/pairs.csv       every matched pair: run ids, NLLs, paired difference
    OUT/multipliers.csv, OUT/multiplier_seeds.csv   the compute and time multipliers per comparison and
                        per seed (DESIGN section 14), only where a size has two or more budgets
    OUT/report.md       Markdown; figures linked from OUT/figures/
    OUT/report.html     the same report, self-contained (figures embedded as base64 PNG)
    OUT/figures/*.png

With ``single_file`` (``harness report --single-file``) only ``OUT/report.html`` is written: one file
that carries its figures and style, for a pull request or an e-mail.

``harness report`` writes to ``RESULTS/reports/GRID/`` by default.

Each file is written to a temporary name and renamed into place, so a reader never
sees a half-written file.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from harness.common.files import atomic_write
from harness.common.terms import check_grid
from harness.design.analysis_plan import AnalysisPlan
from harness.report.render.figure_set import all_figures
from harness.report.render.figures import FigureOut
from harness.report.render.sections import render_html, render_markdown
from harness.report.render.summary import progress_sentence
from harness.report.stats.analysis import analyze
from harness.report.stats.degeneracy import find_degenerate
from harness.report.stats.leave_one_out import leave_one_seed_out
from harness.report.stats.multiplier import grid_multipliers
from harness.report.stats.pairing import NoParentError, of_grid, with_axis_sizes
from harness.report.stats.progress import GridProgress, QueuedRun, grid_progress, unreadable_run_ids
from harness.report.stats.provenance import grid_provenance, hardware_by_run
from harness.report.stats.results import ReportStats
from harness.report.stats.robustness import split_tuned


@dataclass(frozen=True, slots=True)
class Frames:
    """The inputs of a report (DESIGN section 5 tables, one grid).

    ``metrics`` and ``routing`` may be None or empty (figures are then skipped);
    ``route_pairs`` and ``route_params`` (the degeneracy records of DESIGN section 3) may
    be None or empty (those degeneracy criteria are then not applied); ``unreadable`` holds
    the store's result files it could not read (``ingest_log`` rows with an error: file,
    error), counted in the grid status.
    """

    final: pl.DataFrame
    runs: pl.DataFrame
    metrics: pl.DataFrame | None = None
    routing: pl.DataFrame | None = None
    route_pairs: pl.DataFrame | None = None
    route_params: pl.DataFrame | None = None
    unreadable: pl.DataFrame | None = None
    bench: pl.DataFrame | None = None  # the store's bench rows (the time multiplier's step ratios, DESIGN 14)


@dataclass(frozen=True, slots=True)
class BuildResult:
    """What :func:`build_report` computed and wrote."""

    stats: ReportStats
    figures: tuple[FigureOut, ...]
    paths: tuple[Path, ...]


def load_frames(store: Any, grid: str) -> Frames:
    """Read one grid's rows from a results store.

    Args:
        store: an object with ``query(sql, params, *, ingest=True) -> polars.DataFrame``
            (``harness.store.store.Store``). Pending result files are ingested by the first query only,
            so all frames see the same set of runs.
        grid: grid name (``runs.grid``).

    Raises:
        ValueError: the grid has no runs; the message lists the grids that exist.
    """
    runs = store.query(
        "SELECT * FROM runs WHERE grid = ? ORDER BY variant, size, budget_tokens, seed", [grid]
    )
    if runs.height == 0:
        grids = store.query("SELECT DISTINCT grid FROM runs", [], ingest=False)["grid"].to_list()
        check_grid(grid, grids, "the results store")
    final = store.query("SELECT * FROM final WHERE grid = ?", [grid], ingest=False)
    in_grid = "run_id IN (SELECT run_id FROM runs WHERE grid = ?)"
    metrics = store.query(
        "SELECT * FROM metrics WHERE ((split = 'val' AND name = 'nll') OR (split = 'train' AND "
        f"name = 'loss')) AND {in_grid} ORDER BY run_id, tokens",
        [grid],
        ingest=False,
    )
    routing = store.query(f"SELECT * FROM routing WHERE {in_grid}", [grid], ingest=False)
    pairs, params = (
        store.query(f"SELECT * FROM {t} WHERE {in_grid}", [grid], ingest=False)
        for t in ("route_pairs", "route_params")
    )
    unreadable = store.query(
        "SELECT file, error FROM ingest_log WHERE error IS NOT NULL ORDER BY file", [], ingest=False
    )
    bench = store.query(
        "SELECT bench_id, created_at, size, variant, step_ms, extra FROM bench", [], ingest=False
    )
    runs, final = with_axis_sizes(runs, final)  # a grid with [axes]: one cell per axis value
    return Frames(final, runs, metrics, routing, pairs, params, unreadable, bench)


def compute_stats(
    frames: Frames,
    *,
    grid: str | None = None,
    allow_partial: bool = False,
    plan: AnalysisPlan | None = None,
    degenerate: Mapping[tuple[str, int, str], str] | None = None,
    progress: GridProgress | None = None,
    leave_one_out: bool = False,
) -> ReportStats:
    """The report's statistics of one grid, without writing anything (``harness report``, ``plan``, ``topup``).

    ``degenerate`` None: found from the frames' routing records (:func:`harness.report.stats.degeneracy.find_degenerate`).
    ``progress``: the grid's status next to the queue (:func:`harness.report.stats.progress.grid_progress`).
    ``leave_one_out``: also run the analysis once without each seed and fill ``influence``
    (:mod:`harness.report.stats.leave_one_out`; descriptive, n more analyses: the report does it, plan and topup not).
    The result carries the grid's provenance (:mod:`harness.report.stats.provenance`): where the runs ran and, where
    they ran on several hardware classes, every verdict re-decided on the largest class's runs alone.
    Arguments and errors as :func:`build_report`.
    """
    if degenerate is None:  # judged on the frozen protocol's runs (the [tuned] runs repeat variant and seed)
        final, runs, _, _ = split_tuned(frames.final, frames.runs)
        degenerate = find_degenerate(final, runs, frames.route_pairs, frames.route_params, grid=grid)
    options = dict(grid=grid, allow_partial=allow_partial, degenerate=degenerate, progress=progress)
    stats = analyze(frames.final, frames.runs, plan=plan, **options)
    final, runs, _, _ = split_tuned(of_grid(frames.final, grid), of_grid(frames.runs, grid))
    hardware = hardware_by_run(runs)

    def decide(hw_class: str) -> ReportStats:
        """The same analysis (plan, degeneracy) on the runs of one hardware class alone."""
        ids = [rid for rid, c in hardware.items() if c == hw_class]
        in_class = pl.col("run_id").is_in(ids)
        return analyze(final.filter(in_class), runs.filter(in_class), plan=stats.plan, **options)

    variants = [v for v in (stats.treatment, *stats.controls, *stats.references) if v]
    stats = dataclasses.replace(
        stats,
        provenance=grid_provenance(stats, final, runs, decide),
        multipliers=grid_multipliers(
            final, runs, parent=stats.parent, variants=variants, plan=stats.plan, bench=frames.bench
        ),
    )
    if not leave_one_out:
        return stats
    again = functools.partial(
        analyze, grid=grid, allow_partial=allow_partial, degenerate=degenerate, cross_checks=False
    )
    final, runs = of_grid(frames.final, grid), of_grid(frames.runs, grid)
    return dataclasses.replace(stats, influence=leave_one_seed_out(stats, final, runs, again))


def build_report(
    frames: Frames,
    out_dir: Path,
    *,
    grid: str | None = None,
    allow_partial: bool = False,
    plan: AnalysisPlan | None = None,
    degenerate: Mapping[tuple[str, int, str], str] | None = None,
    figures: bool = True,
    queue: Mapping[str, QueuedRun | str] | None = None,
    queue_note: str = "",
    single_file: bool = False,
    notes: Sequence[str] = (),
    say: Callable[[str], None] = lambda text: None,
) -> BuildResult:
    """Compute the statistics of one grid and write the report files into ``out_dir``.

    Args:
        frames: the grid's final/runs (required) and metrics/routing (optional) frames.
        out_dir: output folder (created if missing; files in it are replaced).
        grid: grid name (filters the frames if they carry a ``grid`` column; shown in titles).
        allow_partial: protocol mismatches and duplicated runs become warnings (pair left out).
        plan: the analysis plan (default: the one stored with the runs, see
            :func:`harness.design.analysis_plan.plan_from_configs`).
        degenerate: ``{(size, budget_tokens, variant): reason}`` (see :func:`harness.report.stats.analysis.analyze`).
        figures: draw the PNG figures (off: tables only, faster).
        queue: the queue's view of the grid's runs, ``{run_id: QueuedRun | state}``
            (:mod:`harness.report.stats.progress`); None where the queue was not found or not read. The
            report then says so and never claims that every run finished.
        queue_note: where the queue is, or why it was not read (printed with the grid status).
        single_file: write only ``report.html`` (figures embedded as data: URIs), no other file.
        notes: warnings about the store itself, shown at the top of the report with the statistics'
            own (e.g. runs whose result file is gone, :func:`harness.commands.report.missing_files_note`).
        say: called with a line before each long phase (the statistics, the figures, the files), so a
            command can say what it is doing (:func:`harness.common.console.phase`).

    Raises:
        ValueError, harness.report.stats.pairing.ProtocolMismatchError: from :func:`harness.report.stats.analysis.analyze`
            (e.g. no finished run of the parent yet: the message then says what the queue holds).
    """
    progress = grid_progress(
        frames.runs,
        queue,
        grid=grid,
        queue_note=queue_note or ("the queue was not read" if queue is None else ""),
        unreadable=unreadable_run_ids(frames.unreadable),
    )
    cells = frames.final.select("size", "budget_tokens").unique().height if frames.final.height else 0
    say(
        f"computing the statistics: {frames.final.height} finished runs, {cells} size x budget cell(s); "
        "paired tests, leave-one-seed-out, the mixed model ..."
    )
    try:
        stats = compute_stats(
            frames,
            grid=grid,
            allow_partial=allow_partial,
            plan=plan,
            degenerate=degenerate,
            progress=progress,
            leave_one_out=True,
        )
    except NoParentError as exc:
        if not progress.total:
            raise
        raise ValueError(
            f"{exc}: no finished run of the parent yet; {progress_sentence(progress)[0]}"
        ) from None
    if notes:
        stats = dataclasses.replace(stats, warnings=(*stats.warnings, *notes))
    # figures show the frozen protocol's runs
    final = split_tuned(of_grid(frames.final, grid), frames.runs)[0]
    if figures:
        say("drawing the figures ...")
    figs = all_figures(stats, final, frames.metrics, frames.routing) if figures else []
    say(f"writing the report to {out_dir} ...")
    return BuildResult(stats, tuple(figs), _write_files(Path(out_dir), stats, figs, single_file))


def _write_files(
    out_dir: Path, stats: ReportStats, figs: list[FigureOut], single_file: bool
) -> tuple[Path, ...]:
    """Write the report files into ``out_dir`` (created if missing; each file replaced atomically):
    ``figures/*.png``, ``stats.csv``, ``pairs.csv``, ``report.md`` and ``report.html``, or with
    ``single_file`` only ``report.html`` (figures embedded). Returns the paths written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    generated = f"Generated {_dt.datetime.now(_dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}"
    html = render_html(stats, figs, generated=generated).encode()
    if single_file:
        return (atomic_write(out_dir / "report.html", html),)
    fig_dir = out_dir / "figures"
    fig_dir.mkdir(exist_ok=True)
    paths = [atomic_write(fig_dir / f"{f.name}.png", f.png) for f in figs]
    paths.append(atomic_write(out_dir / "stats.csv", stats.to_frame().write_csv().encode()))
    paths.append(atomic_write(out_dir / "pairs.csv", stats.pairs_frame().write_csv().encode()))
    m = stats.multipliers
    if (
        m is not None and m.rows
    ):  # a grid with 2+ budgets at a size (DESIGN 14); single-budget outputs unchanged
        paths.append(atomic_write(out_dir / "multipliers.csv", m.frame().write_csv().encode()))
        paths.append(atomic_write(out_dir / "multiplier_seeds.csv", m.seeds_frame().write_csv().encode()))
    paths.append(
        atomic_write(out_dir / "report.md", render_markdown(stats, figs, generated=generated).encode())
    )
    paths.append(atomic_write(out_dir / "report.html", html))
    return tuple(paths)
