"""Train queued runs, one after another, until the queue is empty.

Start as many workers as you have devices, on as many machines as share the queue
(RESULTS on a shared filesystem, or --storage postgresql://... / journal:PATH). Each
run is handed to exactly one worker. A worker holds a lease on its run and refreshes
it every few seconds; a run whose worker died (lease older than --lease-s, or the
process gone on this host) is queued again by the next worker and resumes from its
checkpoint. A worker that was only stopped (SIGSTOP, a frozen machine) past its lease
and wakes up after another worker took its run says "lease lost to HOST:PID ...", writes
nothing more for that run (the lease is checked before each checkpoint and held while the
result file is renamed into place) and goes on with the next run. A run whose training
raises is recorded as failed and retried up to --retries times; the worker exits 1 when
every run it took failed. Ctrl-C or SIGTERM gives the current run back to the queue. An
unreachable storage (a database restarting) is retried for --storage-retry-s seconds,
then the worker stops with an error; start it again once the storage is back.

Prints one line per run start and end, with the grid's finished/total count:
  [3/18] done rd_controls_small:small:rd_attnres:s0:100000 (41 s)

Progress within a run goes to stderr, as $HARNESS_PROGRESS says:
  auto   (default) a live bar when stderr is a terminal no other worker trains on; else
         (a file, a pipe, a terminal shared by several workers) complete lines, each
         prefixed with its run, one per 10 % of the budget and at least one a minute:
         [rd_attnres s0]  40% 40,960/100,000 tokens, 561 tok/s, ETA 105 s
  lines  always lines (logs, CI, several workers started from one shell)
  off    no progress within runs (like --quiet)
Each worker also writes its run's tokens and tokens/s into its lease with every
heartbeat; `harness status --watch` shows them. Internal retries that usually succeed
(a DuckDB ingest deferred, a storage briefly unreachable) are printed with --verbose.
A --grid that names no queued grid is an error naming the grids there (with --wait,
a note, and the worker waits for it to be queued).

example:
  harness work                       # until nothing is queued
  harness work --grid rd_paper --wait --storage journal:/shared/rd/queue.journal
  for i in 1 2; do harness work --threads 1 & done; wait    # two workers on 2 cores
  harness work --devices 4 --strategy ddp     # each run on 4 GPUs of this machine
"""

from __future__ import annotations

import argparse
import signal
import sys
from collections import Counter
from collections.abc import Mapping
from pathlib import Path

from harness import console
from harness.config import TRACKERS
from harness.scheduling.lease import BEAT_S, LEASE_TIMEOUT_S
from harness.scheduling.storage import STORAGE_RETRY_S
from harness.scheduling.worker import MAX_RETRIES


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--storage", metavar="URL", default=None,
                        help="queue storage: postgresql://..., journal:PATH or PATH.journal "
                             "(default: RESULTS/queue.journal)")
    parser.add_argument("--max-runs", type=int, default=None, metavar="N",
                        help="stop after N runs (default: no limit)")
    parser.add_argument("--grid", metavar="NAME", default=None, help="only take runs of this grid")
    parser.add_argument("--wait", action="store_true",
                        help="when nothing is queued, keep polling instead of stopping")
    parser.add_argument("--poll-s", type=float, default=10.0, metavar="S",
                        help="polling interval with --wait, seconds (default: 10)")
    parser.add_argument("--retries", type=int, default=MAX_RETRIES, metavar="N",
                        help=f"retries of a run whose training raised (default: {MAX_RETRIES})")
    parser.add_argument("--lease-s", type=float, default=LEASE_TIMEOUT_S, metavar="S",
                        help="a run whose worker has not refreshed its lease for S seconds is "
                             f"reclaimed (default: {LEASE_TIMEOUT_S:g}; clocks must agree well within it)")
    parser.add_argument("--storage-retry-s", type=float, default=STORAGE_RETRY_S, metavar="S",
                        help="retry an unreachable queue storage (backoff 0.5 s doubling to 10 s) for "
                             f"S seconds, then stop with an error (default: {STORAGE_RETRY_S:g})")
    parser.add_argument("--threads", type=int, default=0, metavar="N",
                        help="torch CPU threads for this worker (0 = torch's default; use cores / workers)")
    parser.add_argument("--devices", default="1", help="devices per run for Lightning (e.g. 4 with --strategy ddp)")
    parser.add_argument("--strategy", default="auto", help="Lightning strategy for each run, e.g. ddp")
    parser.add_argument("--accelerator", default="auto", help="cpu, gpu or auto")
    parser.add_argument("--quiet", action="store_true", help="no per-run progress lines")
    parser.add_argument("--logger", action="append", default=[], choices=TRACKERS, metavar="NAME",
                        help=f"stream each run's live curves to a tracker ({', '.join(TRACKERS)}), besides its "
                        "[train] loggers; repeatable; outside the protocol hash")


def _check_writable(results: Path) -> None:
    """A worker writes checkpoints and result files under ``results``: fail now, with the
    system's own reason (read-only file system, permission denied), not after a run trained.

    Raises:
        OSError: ``results`` cannot be created or written.
    """
    import tempfile

    results.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryFile(dir=results, prefix=".probe-"):
        pass


def _sigterm(signum, frame):
    raise KeyboardInterrupt("SIGTERM")


def main(args: argparse.Namespace, *, train_fn=None, on_failure=None) -> int:
    """``harness work``: :func:`run`, then its one-line summary; exit status 1 when every run
    the worker took failed."""
    outcomes = run(args, train_fn=train_fn, on_failure=on_failure)
    print(summary(outcomes))
    n = sum(outcomes.values())
    if n and outcomes.get("failed", 0) == n:
        print(f"harness work: error: every run this worker took failed ({n}); see `harness status` for "
              "their errors", file=sys.stderr)
        return 1
    return 0


def summary(outcomes: Mapping[str, int]) -> str:
    """``worker trained N runs: a done, b diverged, c failed[, d pruned][, e lost to another
    worker]`` of an outcome count."""
    pruned = f", {outcomes['pruned']} pruned" if outcomes.get("pruned") else ""
    lost = f", {outcomes['lost']} lost to another worker" if outcomes.get("lost") else ""
    return (f"worker trained {sum(outcomes.values())} runs: {outcomes.get('done', 0)} done, "
            f"{outcomes.get('diverged', 0)} diverged, {outcomes.get('failed', 0)} failed{pruned}{lost}")


def run(args: argparse.Namespace, *, train_fn=None, on_failure=None, stop=None) -> Counter:
    """Run the worker loop (:func:`harness.scheduling.worker.work`) with ``harness work``'s
    options; returns the outcomes of the runs it trained.

    ``train_fn``/``on_failure`` default to :func:`~harness.scheduling.worker.train_unless_finished`
    and :func:`~harness.scheduling.worker.record_failure`. Without ``stop``, SIGTERM raises
    ``KeyboardInterrupt`` at once (the run is released, resuming from its last checkpoint);
    with a :class:`~harness.scheduling.stop.StopRequest` (``harness launch``'s tasks) the caller
    owns the signals and a stop comes at the next batch boundary, with a checkpoint of it.
    """
    import functools

    import optuna

    from harness.commands import set_threads
    from harness.scheduling import worker
    from harness.scheduling.queue import RunQueue
    from harness.terms import check_grid

    if args.retries < 0:
        raise ValueError(f"--retries {args.retries} must be >= 0")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if train_fn is None:
        set_threads(args.threads)
        devices = int(args.devices) if str(args.devices).isdigit() else args.devices
        extra = {"stop_requested": stop} if stop is not None else {}
        extra.update({"loggers": tuple(args.logger)} if args.logger else {})
        train_fn = functools.partial(worker.train_unless_finished, progress=not args.quiet,
                                     accelerator=args.accelerator, devices=devices, strategy=args.strategy, **extra)
    on_failure = on_failure or worker.record_failure
    if args.storage_retry_s <= 0:
        raise ValueError(f"--storage-retry-s {args.storage_retry_s:g} must be positive")
    console.progress_mode()  # a bad $HARNESS_PROGRESS is one line now, not a traceback mid-run
    _check_writable(Path(args.results))
    queue = RunQueue.open(args.storage, args.results, lease_timeout_s=args.lease_s, retry_s=args.storage_retry_s)
    if args.grid is not None:
        try:
            check_grid(args.grid, (r.grid for r in queue.runs().values()), queue.where)
        except ValueError as exc:
            if not args.wait:
                raise
            print(f"note: {exc}; waiting for it to be queued (--wait)")
    beat_s = min(BEAT_S, args.lease_s / 4)
    previous = signal.signal(signal.SIGTERM, _sigterm) if stop is None else None
    try:
        return worker.work(queue, train_fn, args.results, on_failure=on_failure, grid=args.grid,
                           max_runs=args.max_runs, wait=args.wait, poll_s=args.poll_s,
                           max_retries=args.retries, beat_s=beat_s, retry_s=args.storage_retry_s, stop=stop)
    finally:
        if stop is None:
            signal.signal(signal.SIGTERM, previous)
