"""Show the run queue: queued/running/done/diverged/failed runs per grid, and an ETA; and launched jobs.

The ETA of a grid is (queued + running runs) x (mean wall time of its finished runs)
/ (live workers); live workers are those holding a fresh lease, so idle workers
waiting with --wait are not counted. Stale leases (a worker that stopped beating)
are listed; the next `harness work` queues their runs again.

Then the workers started by `harness launch` (the newest --launches launches recorded in
RESULTS/launches): each job's state from SLURM (squeue, then sacct) or, for local
workers, from their processes, with how often SLURM requeued it and what it trained.

example:
  harness status
  harness status --grid rd_controls_small --storage journal:/shared/rd/queue.journal
"""

from __future__ import annotations

import argparse
import sys
import time

from harness.scheduling.lease import LEASE_TIMEOUT_S
from harness.terms import FINISHED

# display order: waiting, training, finished (done, diverged), failed
COLUMNS = ("queued", "running", *FINISHED, "failed")
LAUNCHES_SHOWN = 5


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--grid", metavar="NAME", default=None, help="only this grid")
    parser.add_argument("--storage", metavar="URL", default=None,
                        help="queue storage: postgresql://..., journal:PATH or PATH.journal "
                             "(default: RESULTS/queue.journal)")
    parser.add_argument("--lease-s", type=float, default=LEASE_TIMEOUT_S, metavar="S",
                        help=f"lease timeout in seconds for judging stale leases (default: {LEASE_TIMEOUT_S:g})")
    parser.add_argument("--launches", type=int, default=LAUNCHES_SHOWN, metavar="N",
                        help=f"show the jobs of the newest N launches (default: {LAUNCHES_SHOWN}; 0: none)")


def _last_line(text: str | None) -> str:
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
    return lines[-1] if lines else "(no error text)"


def main(args: argparse.Namespace) -> int:
    if args.launches < 0:
        raise ValueError(f"--launches {args.launches}: must be >= 0")
    code = _queue_status(args)
    _launches(args.results, args.launches)
    return code


def _launches(results, shown: int) -> None:
    """The jobs of the newest ``shown`` launches (:mod:`harness.scheduling.launch`)."""
    from harness.commands.work import summary
    from harness.scheduling.launch import job_states, read_records

    records = read_records(results) if shown else []
    if not records:
        return
    print(f"launched workers (newest first; {len(records)} launch(es) in {results}/launches):")
    for rec in records[:shown]:
        what = f"job {rec.array_id}" if rec.executor == "slurm" else "controller pid(s)"
        print(f"  {rec.id}: {len(rec.job_ids)} worker(s), {rec.executor}, {what}, launched {rec.created} "
              f"from {rec.host}")
        for job in job_states(rec):
            extra = [f"requeued {job.restarts}x"] if job.restarts else []
            extra += [summary(job.result)] if job.result is not None else []
            extra += [job.detail] if job.detail else []
            print(f"    {job.job_id}  {job.state}" + (f"  ({'; '.join(extra)})" if extra else ""))
        print(f"    folder: {rec.folder}")
    if len(records) > shown:
        print(f"  ... and {len(records) - shown} older launch(es) (--launches N)")


def _queue_status(args: argparse.Namespace) -> int:
    import optuna

    from harness.scheduling.lease import stale_reason
    from harness.scheduling.queue import RunQueue
    from harness.scheduling.storage import COMMAND_RETRY_S, describe_storage
    from harness.scheduling.worker import fmt_duration

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    where = describe_storage(args.storage, args.results)
    try:
        queue = RunQueue.open(args.storage, args.results, lease_timeout_s=args.lease_s, create=False,
                              retry_s=COMMAND_RETRY_S, log=lambda msg: print(msg, file=sys.stderr))
    except FileNotFoundError:
        print(f"no runs queued yet (no queue at {where}); queue a grid: harness queue GRID.toml")
        return 0
    runs = queue.runs(args.grid)
    if not runs:
        grids = sorted({r.grid for r in queue.runs().values()})
        if args.grid and grids:
            raise ValueError(f"no runs of grid {args.grid!r} in {where}; grids there: {', '.join(grids)}")
        print(f"no runs queued yet in {where}; queue a grid: harness queue GRID.toml")
        return 0

    now = time.time()
    workers = queue.live_workers(now)
    grids: dict[str, list] = {}
    for r in runs.values():
        grids.setdefault(r.grid, []).append(r)

    print(f"queue: {where}")
    header = ["grid", *COLUMNS, "total", "mean run", "ETA"]
    rows = []
    for name, rs in grids.items():
        counts = {c: sum(r.state == c for r in rs) for c in COLUMNS}
        walls = [r.wall_s for r in rs if r.state in FINISHED and r.wall_s is not None]
        mean = sum(walls) / len(walls) if walls else None
        remaining = counts["queued"] + counts["running"]
        if remaining == 0:
            eta = "finished"
        elif mean is None:
            eta = "? (no run finished yet)"
        elif not workers:
            eta = "no live workers"
        else:
            eta = "~" + fmt_duration(mean * remaining / len(workers))
        rows.append([name, *(str(counts[c]) for c in COLUMNS), str(len(rs)),
                     fmt_duration(mean) if mean is not None else "-", eta])
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    for row in [header, *rows]:
        print("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))))

    print(f"live workers: {len(workers)}" + (f" ({', '.join(workers)})" if workers else ""))
    stale = [(r.run_id, why) for r in runs.values() if r.lease is not None
             and (why := stale_reason(r.lease, now=now, timeout_s=args.lease_s, host=queue.host))]
    if stale:
        print(f"stale leases: {len(stale)} (the next `harness work` queues these runs again)")
        for rid, why in stale:
            print(f"  {rid}: {why}")
    failed = [r for r in runs.values() if r.state == "failed"]
    if failed:
        print(f"failed runs: {len(failed)} (`harness queue GRID.toml --retry-failed` queues them again)")
        for r in failed[:20]:
            print(f"  {r.run_id} (attempt {r.attempt}): {_last_line(r.error)}")
        if len(failed) > 20:
            print(f"  ... and {len(failed) - 20} more")
    return 0
