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
then the worker stops with an error; start it again once the storage is back. A full disk
is the environment's fault, not the run's: a worker takes a run only when the results
folder has the free space its checkpoints need, and a write that meets a full disk gives
the run back (no retry spent); either way the worker stops with one line naming the full
path, its free space and what the run needs. A results folder that does not exist is
refused (a mistyped path) unless --create. A corpus is found by its content: --corpus PATH
says where this machine has it (checked against the grid's corpus fingerprint; another
text is refused with both fingerprints), else the path the queue records for the grid
(`harness topup --corpus`, `harness import --corpus`), else the run's config. A corpus
that is not there is the machine's fault too: the run goes back to the queue (no retry
spent) and the worker stops with one line naming the path, the fingerprint and --corpus.

Prints one line per run start and end, with the grid's finished/total count:
  [3/18] done rd_controls_small:small:rd_attnres:s0:98304 (41 s)

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
  harness work --devices 4                    # each run on 4 GPUs of this machine (4 DDP ranks)
  harness work --gpus 2,3                     # this worker's runs on GPUs 2 and 3 (2 ranks)

GPUs: a worker takes --devices free GPUs of CUDA_VISIBLE_DEVICES (else of the node), each
locked for its life by its UUID ($HARNESS_DEVICE_LOCKS, default <tmp>/harness-devices), so
workers on one node never share a device unless --gpus names it (a shared lock: workers naming
it share it, others skip it); --devices N trains each claimed run on N ranks, started around
that run (rank 0 is this worker, which holds the lease). A rank that dies stops the run within
seconds: the run is queued again (no retry spent) and the worker stops, naming the rank.

Hardware: each run records its hardware class (device model, precision, torch, compile) and its
numerics key (the training code's numerics revision on its routing path, e.g. two_phase/2, --routing
picks the path; the micro-batch size as resolved; the world size). With a grid's [schedule] pair_hardware
= "same" (the default) the first run of a seed binds the seed to its worker's class and numerics key, and
the seed's other runs wait for a worker of both
(`harness status` shows runs waiting for a class no live worker has); --any-hardware lets this worker
take them (docs/scaling-out.md).
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter

from harness.commands.options import (
    add_setting_argument,
    add_storage,
    execution_settings,
    set_unflagged_defaults,
)
from harness.scheduling.queue.lease import LEASE_TIMEOUT_S
from harness.scheduling.queue.storage import STORAGE_RETRY_S
from harness.scheduling.workers.devices import check_accelerator
from harness.scheduling.workers.loop import summary
from harness.scheduling.workers.options import WorkOptions
from harness.scheduling.workers.retry import MAX_RETRIES
from harness.scheduling.workers.start import run_worker


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_storage(parser)
    parser.add_argument(
        "--max-runs", type=int, default=None, metavar="N", help="stop after N runs (default: no limit)"
    )
    parser.add_argument("--grid", metavar="NAME", default=None, help="only take runs of this grid")
    _add_corpus(parser)
    parser.add_argument(
        "--wait", action="store_true", help="when nothing is queued, keep polling instead of stopping"
    )
    parser.add_argument(
        "--poll-s",
        type=float,
        default=10.0,
        metavar="S",
        help="polling interval with --wait, seconds (default: 10)",
    )
    parser.add_argument(
        "--retries",
        type=int,
        default=MAX_RETRIES,
        metavar="N",
        help=f"retries of a run whose training raised (default: {MAX_RETRIES})",
    )
    parser.add_argument(
        "--lease-s",
        type=float,
        default=LEASE_TIMEOUT_S,
        metavar="S",
        help="a run whose worker has not refreshed its lease for S seconds is "
        f"reclaimed (default: {LEASE_TIMEOUT_S:g}; clocks must agree well within it)",
    )
    parser.add_argument(
        "--storage-retry-s",
        type=float,
        default=STORAGE_RETRY_S,
        metavar="S",
        help="retry an unreachable queue storage (backoff 0.5 s doubling to 10 s) for "
        f"S seconds, then stop with an error (default: {STORAGE_RETRY_S:g})",
    )
    add_setting_argument(parser, "threads", scope="for this worker; use cores / workers")
    add_setting_argument(
        parser,
        "devices",
        scope="the ranks of each run: the worker claims one run and trains it on N ranks of this machine, one "
        "per device, started around that run",
        default=None,
        default_words="the number of --gpus, else 1",
    )
    parser.add_argument(
        "--gpus",
        default=None,
        metavar="LIST",
        help="the GPUs this worker trains on, e.g. 0,1 (shared with other workers only when "
        "they name them too); default: --devices free GPUs of CUDA_VISIBLE_DEVICES (or "
        "the node), each locked for this worker's life, so workers never share one",
    )
    for name in ("strategy", "accelerator", "micro_batch_size", "routing"):
        add_setting_argument(parser, name)
    set_unflagged_defaults(
        parser, "num_nodes", "stop_after_tokens"
    )  # a worker's runs: one node, no planned stop
    parser.add_argument("--quiet", action="store_true", help="no per-run progress lines")
    _add_hardware_argument(parser)
    parser.add_argument(
        "--create",
        action="store_true",
        help="make the results folder if it does not exist (default: refuse a folder that "
        "does not exist, so a mistyped --results is not a new, empty queue)",
    )
    add_setting_argument(parser, "loggers")


def _add_hardware_argument(parser: argparse.ArgumentParser) -> None:
    """``--any-hardware`` (:mod:`harness.scheduling.queue.hardware_pairs`)."""
    parser.add_argument(
        "--any-hardware",
        action="store_true",
        help='take runs that a grid\'s [schedule] pair_hardware = "same" holds for another hardware class '
        "(the other runs of their seed trained there; `harness status` lists them): the pair then "
        "straddles two classes, which the report shows",
    )


def _add_corpus(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--corpus",
        metavar="PATH",
        default=None,
        help="where this machine has the corpus (default: the path the queue records for the grid, "
        "else the run's config); checked against the grid's corpus fingerprint: another text is refused",
    )


def main(args: argparse.Namespace, *, train_fn=None, on_failure=None) -> int:
    """``harness work``: :func:`run`, then its one-line summary; exit status 1 when every run
    the worker took failed."""
    check_accelerator(args.accelerator, args.gpus)  # a GPU asked for where there is none: one line
    outcomes = run(args, train_fn=train_fn, on_failure=on_failure)
    print(summary(outcomes))
    n = sum(outcomes.values())
    if n and outcomes.get("failed", 0) == n:
        print(
            f"harness work: error: every run this worker took failed ({n}); see `harness status` for "
            "their errors",
            file=sys.stderr,
        )
        return 1
    return 0


def work_options(args: argparse.Namespace) -> WorkOptions:
    """``harness work``'s options as the worker's :class:`~harness.scheduling.workers.options.WorkOptions`.

    Raises:
        ValueError: a bad ``--micro-batch-size`` (refused before any claim).
    """
    return WorkOptions(
        results=str(args.results),
        storage=args.storage,
        grid=args.grid,
        max_runs=args.max_runs,
        wait=args.wait,
        poll_s=args.poll_s,
        retries=args.retries,
        lease_s=args.lease_s,
        storage_retry_s=args.storage_retry_s,
        create=args.create,
        devices=args.devices,
        gpus=args.gpus,
        any_hardware=args.any_hardware,
        settings=execution_settings(args, devices=1),  # the ranks per run: from the worker's GPU claim
        corpus=args.corpus,
    )


def run(args: argparse.Namespace, *, train_fn=None, on_failure=None, stop=None) -> Counter:
    """:func:`~harness.scheduling.workers.start.run_worker` with ``harness work``'s options."""
    return run_worker(work_options(args), train_fn=train_fn, on_failure=on_failure, stop=stop)
