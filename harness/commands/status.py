"""Show the run queue: runs per grid and state, each running run's progress, and ETAs; and launched jobs.

Per grid: queued/running/done/diverged/failed runs, the mean wall time of its finished runs
and an ETA: the running runs' own time left plus (queued runs) x (mean run), over the live
workers (a run's duration is the mean wall time of the grid's finished runs, else what the
running runs' throughput makes of their tokens). Per running run: its worker, the tokens it
has trained of its total, its tokens/s (over its optimiser steps: set-up and evaluations left out)
and its ETA, from the progress each worker writes into its lease with every heartbeat
(every few seconds), and how long ago that was. Live workers are those holding a fresh
lease, so idle workers waiting with --wait are not counted; a worker that has started but not yet
claimed a run (loading torch, checking the queued runs: seconds to half a minute) is listed under
"starting workers", from its marker in the results folder. Stale leases (a worker that
stopped beating) are listed; the next `harness work` queues their runs again. A --grid
that names no grid in the queue is an error naming the grids there. Queued runs that a grid's
[schedule] pair_hardware = "same" holds for a hardware class and numerics no live worker has (the
other runs of their seed trained there) are listed under them: a worker of that class and numerics
takes them, or `harness work --any-hardware` (docs/scaling-out.md).

Result files the results store cannot read (truncated, another schema, a stale write) are
listed with why; a grid whose runs all trained but some result is unreadable shows
"trained; N result(s) unreadable", not "finished".

--watch redraws every --interval seconds (default 5) until Ctrl-C (exit 0); when stdout
is not a terminal it prints the blocks one after another, each under a time stamp. With
--until-done it also stops (exit 0) after the first block in which no run of the grid
(--grid, else every grid in the queue) is queued or running, so a script can wait on it.

Then the workers started by `harness launch` (the newest --launches launches recorded in
RESULTS/launches): each job's state from SLURM (squeue, then sacct) or, for local
workers, from their processes, with how often SLURM requeued it and what it trained.

example:
  harness status
  harness status --watch --interval 2
  harness status --watch --until-done --grid rd_controls_small && harness report --grid rd_controls_small
  harness status --grid rd_controls_small --storage journal:/shared/rd/queue.journal
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import time
from urllib.parse import unquote

from harness.commands.options import add_storage
from harness.common.interrupt import prompt_exit
from harness.common.terms import FINISHED, axes_label, check_grid, parse_run_id
from harness.scheduling.queue.lease import LEASE_TIMEOUT_S
from harness.scheduling.workers.starting import starting_workers

# display order: waiting, training, finished (done, diverged; pruned where a tuning study has any), failed
COLUMNS = ("queued", "running", *FINISHED, "failed")
WATCH_INTERVAL_S = 5.0
CLEAR = "\x1b[H\x1b[2J"  # cursor home, clear screen (ANSI)
LAUNCHES_SHOWN = 5


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--grid", metavar="NAME", default=None, help="only this grid")
    add_storage(parser)
    parser.add_argument(
        "--lease-s",
        type=float,
        default=LEASE_TIMEOUT_S,
        metavar="S",
        help=f"lease timeout in seconds for judging stale leases (default: {LEASE_TIMEOUT_S:g})",
    )
    parser.add_argument("--watch", action="store_true", help="redraw until Ctrl-C")
    parser.add_argument(
        "--until-done",
        action="store_true",
        help="with --watch: stop when no run of the grid (--grid, else any) is queued or running",
    )
    parser.add_argument(
        "--interval",
        type=float,
        default=None,
        metavar="S",
        help=f"seconds between redraws with --watch (default: {WATCH_INTERVAL_S:g})",
    )
    parser.add_argument(
        "--launches",
        type=int,
        default=LAUNCHES_SHOWN,
        metavar="N",
        help=f"show the jobs of the newest N launches (default: {LAUNCHES_SHOWN}; 0: none)",
    )


def _last_line(text: str | None) -> str:
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
    return lines[-1] if lines else "(no error text)"


def _table(header: list[str], rows: list[list[str]], left: int = 1) -> list[str]:
    """Fixed-width rows; the first ``left`` columns left-aligned, the others right-aligned."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    return [
        "  ".join(c.ljust(w) if i < left else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths)))
        for row in [header, *rows]
    ]


def launch_lines(results, shown: int) -> list[str]:
    """The jobs of the newest ``shown`` launches (:mod:`harness.scheduling.launch`), as lines."""
    from harness.scheduling.launch import job_states, read_records
    from harness.scheduling.workers.loop import summary

    records = read_records(results) if shown else []
    if not records:
        return []
    out = [f"launched workers (newest first; {len(records)} launch(es) in {results}/launches):"]
    for rec in records[:shown]:
        what = f"job {rec.array_id}" if rec.executor == "slurm" else "controller pid(s)"
        out.append(
            f"  {rec.id}: {len(rec.job_ids)} worker(s), {rec.executor}, {what}, launched {rec.created} "
            f"from {rec.host}"
        )
        for job in job_states(rec):
            extra = [f"requeued {job.restarts}x"] if job.restarts else []
            extra += [summary(job.result)] if job.result is not None else []
            extra += [job.detail] if job.detail else []
            out.append(f"    {job.job_id}  {job.state}" + (f"  ({'; '.join(extra)})" if extra else ""))
        out.append(f"    folder: {rec.folder}")
    if len(records) > shown:
        out.append(f"  ... and {len(records) - shown} older launch(es) (--launches N)")
    return out


def _run_left_s(r, mean: float | None, now: float) -> float | None:
    """Seconds a running run still needs: from its live progress, else the grid's mean run."""
    p = r.lease.progress if r.lease is not None else None
    eta = p.eta_s(now) if p is not None else None
    return eta if eta is not None else mean


def _grid_rows(
    grids: list[tuple[str, list]],
    columns: list[str],
    n_workers: int,
    now: float,
    fmt_duration,
    bad_ids: frozenset[str] = frozenset(),
    starting: bool = False,
) -> list[list[str]]:
    rows = []
    for name, rs in grids:
        counts = {c: sum(r.state == c for r in rs) for c in columns}
        walls = [r.wall_s for r in rs if r.state in FINISHED and r.wall_s is not None]
        mean = sum(walls) / len(walls) if walls else None
        if mean is None:  # no run finished yet: what the running runs' throughput makes of a whole run
            whole = [
                p.total_tokens / p.tokens_per_s
                for r in rs
                if r.state == "running"
                and r.lease is not None
                and (p := r.lease.progress) is not None
                and p.tokens_per_s
            ]
            per_run = sum(whole) / len(whole) if whole else None
        else:
            per_run = mean
        left = [_run_left_s(r, per_run, now) for r in rs if r.state == "running"]
        unreadable = sum(r.state in FINISHED and r.run_id in bad_ids for r in rs)
        if counts["queued"] + counts["running"] == 0 and unreadable:
            eta = f"trained; {unreadable} result(s) unreadable"
        elif counts["queued"] + counts["running"] == 0:
            eta = "finished"
        elif per_run is None or None in left:
            eta = "? (no run finished yet)"
        elif not n_workers:
            eta = "workers starting" if starting else "no live workers"
        else:
            eta = "~" + fmt_duration((sum(left) + counts["queued"] * per_run) / n_workers)
        rows.append(
            [
                name,
                *(str(counts[c]) for c in columns),
                str(len(rs)),
                fmt_duration(mean) if mean is not None else "-",
                eta,
            ]
        )
    return rows


def _with_cells(grids: dict[str, list]) -> list[tuple[str, list]]:
    """``(row name, runs)`` per grid and, after each grid whose runs sweep ``[axes]``, one per cell's axis
    values (``"  lr 0.001"``: that value's runs, the whole grid's row above them; DESIGN section 1.2)."""
    out: list[tuple[str, list]] = []
    for name, rs in grids.items():
        out.append((name, rs))
        cells: dict[str, list] = {}
        for r in rs:
            try:
                axes = parse_run_id(r.run_id).axes
            except ValueError:  # an id this code cannot read stays in its grid's row only
                continue
            if axes:
                cells.setdefault("  " + axes_label(axes), []).append(r)
        out += sorted(cells.items())
    return out


def _running_rows(runs: list, now: float, fmt_duration) -> list[list[str]]:
    rows = []
    for r in runs:
        lease, p = r.lease, (r.lease.progress if r.lease is not None else None)
        worker = lease.worker if lease is not None and lease.host else "?"
        beat = f"{max(now - lease.beat, 0):.0f} s ago" if lease is not None and lease.host else "-"
        if p is None:
            rows.append([r.run_id, worker, "starting", "-", "-", beat])
            continue
        eta = p.eta_s(now)
        rows.append(
            [
                r.run_id,
                worker,
                f"{p.tokens:,}/{p.total_tokens:,} ({100 * p.tokens / max(p.total_tokens, 1):.0f}%)",
                f"{p.tokens_per_s:,.0f}" if p.tokens_per_s else "-",
                fmt_duration(eta) if eta is not None else "-",
                beat,
            ]
        )
    return rows


def status_lines(
    queue,
    grid: str | None,
    lease_s: float,
    *,
    now: float | None = None,
    bad: list[tuple[str, str]] = (),
    starting: list[tuple[str, float]] = (),
) -> list[str]:
    """The status block of ``queue`` (optionally one grid) as lines; ``bad``: the ``(file, why)``
    of result files the store cannot read (:meth:`harness.store.store.Store.unreadable`); ``starting``:
    the ``(host:pid, seconds since start)`` of workers not yet claiming
    (:func:`harness.scheduling.workers.starting.starting_workers`).

    Raises:
        ValueError: ``grid`` names no grid in the queue (the message names those there).
    """
    from harness.scheduling.queue.lease import stale_reason
    from harness.scheduling.workers.loop import fmt_duration

    every = queue.runs()
    if grid is not None:
        check_grid(grid, (r.grid for r in every.values()), queue.where)
    runs = {rid: r for rid, r in every.items() if grid is None or r.grid == grid}
    if not runs:
        return [f"no runs queued yet in {queue.where}; queue a grid: harness queue GRID.toml"]
    now = time.time() if now is None else now
    workers = queue.live_workers(now)
    grids: dict[str, list] = {}
    for r in runs.values():
        grids.setdefault(r.grid, []).append(r)

    out = [f"queue: {queue.where}"]
    bad_ids = frozenset(unquote(name.removesuffix(".json")) for name, _ in bad)
    columns = [c for c in COLUMNS if c != "pruned" or any(r.state == "pruned" for r in runs.values())]
    out += _table(
        ["grid", *columns, "total", "mean run", "ETA"],
        _grid_rows(_with_cells(grids), columns, len(workers), now, fmt_duration, bad_ids, bool(starting)),
    )
    out.append(f"live workers: {len(workers)}" + (f" ({', '.join(workers)})" if workers else ""))
    if starting:
        out.append(
            f"starting workers: {len(starting)} ("
            + ", ".join(f"{w}, {fmt_duration(s)} ago" for w, s in starting)
            + "): loading torch and checking the queued runs before their first claim"
        )
    running = [r for r in runs.values() if r.state == "running"]
    if running:
        out.append("running:")
        out += [
            "  " + ln
            for ln in _table(
                ["run", "worker", "tokens", "tok/s", "ETA", "last beat"],
                _running_rows(running, now, fmt_duration),
                left=2,
            )
        ]
    out += _held_lines(queue, runs)
    stale = [
        (r.run_id, why)
        for r in runs.values()
        if r.lease is not None and (why := stale_reason(r.lease, now=now, timeout_s=lease_s, host=queue.host))
    ]
    if stale:
        out.append(f"stale leases: {len(stale)} (the next `harness work` queues these runs again)")
        out += [f"  {rid}: {why}" for rid, why in stale]
    failed = [r for r in runs.values() if r.state == "failed"]
    if failed:
        out.append(f"failed runs: {len(failed)} (`harness queue GRID.toml --retry-failed` queues them again)")
        out += [f"  {r.run_id} (attempt {r.attempt}): {_last_line(r.error)}" for r in failed[:20]]
        if len(failed) > 20:
            out.append(f"  ... and {len(failed) - 20} more")
    return out


def _held_lines(queue, runs: dict) -> list[str]:
    """Lines for queued runs held for a hardware class and numerics no live worker has (a grid's ``[schedule]
    pair_hardware = "same"``, :func:`harness.scheduling.queue.hardware_pairs.waiting_for_hardware`)."""
    from harness.scheduling.queue.hardware_pairs import waiting_for_hardware

    held = waiting_for_hardware(queue.storage, runs, queue.studies())
    out = []
    for hardware, ids in sorted(held.items()):
        out.append(
            f"waiting for hardware class {hardware}: {len(ids)} run(s), which no live worker has (their seed's "
            "other runs trained there; a worker of that class and numerics takes them, or `harness work --any-hardware`)"
        )
        out += [f"  {rid}" for rid in sorted(ids)[:20]] + (
            [f"  ... and {len(ids) - 20} more"] if len(ids) > 20 else []
        )
    return out


def main(args: argparse.Namespace) -> int:
    import optuna

    from harness.scheduling.queue.storage import describe_storage

    if args.launches < 0:
        raise ValueError(f"--launches {args.launches}: must be >= 0")
    if args.interval is not None and not args.watch:
        raise ValueError("--interval S goes with --watch")
    if args.until_done and not args.watch:
        raise ValueError("--until-done goes with --watch (plain `harness status` prints once)")
    interval = WATCH_INTERVAL_S if args.interval is None else args.interval
    if not interval > 0:
        raise ValueError(f"--interval {args.interval:g}: must be a positive number of seconds")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    where = describe_storage(args.storage, args.results)
    if args.storage is None and not args.results.exists() and not args.watch:
        raise FileNotFoundError(
            f"results folder {str(args.results)!r} does not exist (set --results DIR or $HARNESS_RESULTS)"
        )
    if not args.watch:
        print("\n".join(_lines(args, _open(args, where), where)))
        return 0
    with prompt_exit(0) as ctrl_c:  # Ctrl-C is the way out of --watch, wherever it lands
        try:
            return _watch(args, where, interval)
        except KeyboardInterrupt:
            return 0
        except Exception:
            if ctrl_c.seen:  # a library turned the Ctrl-C into its own error (DuckDB: "Query interrupted")
                return 0
            raise


def _open(args: argparse.Namespace, where: str):
    """The queue, or ``None`` when there is none yet.

    Raises:
        ValueError: ``--grid`` given and no queue.
    """
    from harness.scheduling.queue.run_queue import RunQueue
    from harness.scheduling.queue.storage import COMMAND_RETRY_S

    try:
        return RunQueue.open(
            args.storage,
            args.results,
            lease_timeout_s=args.lease_s,
            create=False,
            retry_s=COMMAND_RETRY_S,
            log=lambda msg: print(msg, file=sys.stderr),
        )
    except FileNotFoundError:
        if args.grid is not None:
            raise ValueError(f"no runs of grid {args.grid!r}: no queue at {where}") from None
        return None


def _lines(args: argparse.Namespace, queue, where: str) -> list[str]:
    """What one `harness status` prints: the queue's grids and runs, unreadable results, launches."""
    bad, said = _unreadable(args)
    if queue is not None:
        starting = starting_workers(args.results, timeout_s=args.lease_s)
        lines = status_lines(queue, args.grid, args.lease_s, bad=bad, starting=starting)
    elif args.storage is None and not args.results.exists():
        lines = [f"results folder {args.results} does not exist (yet); no runs queued there"]
    else:
        lines = [f"no runs queued yet (no queue at {where}); queue a grid: harness queue GRID.toml"]
    return lines + said + launch_lines(args.results, args.launches)


def _watch(args: argparse.Namespace, where: str, interval: float) -> int:
    """Print the status every ``interval`` seconds until Ctrl-C (or, ``--until-done``, the grid ends)."""
    tty = sys.stdout.isatty()
    queue = None
    while True:
        queue = queue if queue is not None else _open(args, where)
        lines = _lines(args, queue, where)
        stamp = dt.datetime.now().strftime("%Y-%m-%d %H:%M:%S")
        head = f"{stamp}  every {interval:g} s, Ctrl-C to stop"
        if tty:
            sys.stdout.write(CLEAR + head + "\n" + "\n".join(lines) + "\n")
        else:
            sys.stdout.write(f"--- {head}\n" + "\n".join(lines) + "\n\n")
        sys.stdout.flush()
        if args.until_done and _finished(queue, args.grid):
            print(
                f"{'grid ' + args.grid if args.grid else 'every grid'}: nothing queued or running; "
                "stopping (--until-done)"
            )
            return 0
        time.sleep(interval)


def _finished(queue, grid: str | None) -> bool:
    """Whether no run of ``grid`` (``None``: of any grid) is queued or running (also with no queue)."""
    runs = queue.runs(grid) if queue is not None else {}
    return not any(r.state in ("queued", "running") for r in runs.values())


def _unreadable(args: argparse.Namespace) -> tuple[list[tuple[str, str]], list[str]]:
    """The result files the store cannot read (a run the queue calls done may lack its result),
    and the lines that name them with why (none when there are none)."""
    import io

    from harness.commands.sql import warn_unreadable
    from harness.store.store import Store

    text = io.StringIO()
    bad = warn_unreadable(Store(args.results, lock_timeout_s=2.0), "", file=text)
    return bad, text.getvalue().splitlines()
