"""Expand an ablation grid (TOML) into runs and add them to the run queue.

Idempotent: a run already queued, running or done is not added again, so queueing
the same grid twice adds nothing, and a grid with a new seed adds only the new runs.
Failed runs are left alone unless --retry-failed. A run id (grid:size:variant:s<seed>:
<budget>) names one config: changing a queued grid's [train] table is an error
(rename the grid instead), and so is changing its [analysis] plan once any of its
runs is queued: the plan is fixed before the runs.

A grid's [tuned] table adds, for each listed variant, runs at its own tuned settings
(run ids ending in :tuned): "tune:NAME" takes the best params of that tuning study in
this storage now (see `harness tune`), a table gives them. A queue written by the previous
layout (one Optuna study "harness" for every grid) is converted into one study per grid
when none of its runs is queued or running (a message says so).

The corpus is the grid's `corpus`, overridden by $HARNESS_CORPUS, overridden by
--corpus; a relative path is resolved against the current directory and stored
absolute in each run's config (hf:OWNER/NAME:CONFIG specs are stored as they are).

Storage: the default queue is RESULTS/queue.journal (an Optuna journal file).
--storage journal:/shared/fs/queue.journal (or any path ending in .journal) puts
it on a filesystem shared by several machines; --storage postgresql://USER:PASS@HOST/DB
uses a PostgreSQL server (driver psycopg 3: pip install 'rd-harness[postgres]';
postgresql+psycopg2://... for psycopg2). sqlite: is refused (it hands one run to two workers).

example:
  harness queue ablations/rd_controls_small.toml
  harness queue ablations/rd_paper.toml --corpus hf:HuggingFaceFW/fineweb-edu:sample-10BT \\
      --storage journal:/shared/rd/queue.journal
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from harness.scheduling.grid import check_corpus, check_plan_unchanged, load_grid, resolve_tuned


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("grid", type=Path, metavar="GRID.toml", help="grid spec (see ablations/README.md)")
    parser.add_argument("--corpus", metavar="C", default=None,
                        help="corpus overriding the grid's (default: $HARNESS_CORPUS, else the grid's)")
    parser.add_argument("--storage", metavar="URL", default=None,
                        help="queue storage: postgresql://..., journal:PATH or PATH.journal "
                             "(default: RESULTS/queue.journal)")
    parser.add_argument("--retry-failed", action="store_true",
                        help="queue failed runs of this grid again (retry counters reset)")


def main(args: argparse.Namespace) -> int:
    import optuna

    from harness.scheduling.queue import RunQueue
    from harness.scheduling.storage import COMMAND_RETRY_S, describe_storage

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    grid = load_grid(args.grid)
    if args.corpus is not None:
        corpus, source = args.corpus, "--corpus"
    elif os.environ.get("HARNESS_CORPUS"):
        corpus, source = os.environ["HARNESS_CORPUS"], "$HARNESS_CORPUS"
    else:
        corpus, source = grid.corpus, f"key 'corpus' of {args.grid}"
    configs = grid.expand(corpus=corpus, tuned={})  # [tuned] runs need the storage: below
    check_corpus(configs[0].corpus, source=source)

    from harness.scheduling import legacy, tuning

    queue = RunQueue.open(args.storage, args.results, retry_s=COMMAND_RETRY_S,
                          log=lambda msg: print(msg, file=sys.stderr))
    legacy.convert(queue, values=legacy.result_values(args.results), log=lambda msg: print(msg, file=sys.stderr))
    if grid.tuned:
        def best(study: str) -> tuple[str, dict]:
            spec, params, _ = tuning.best_params(queue.storage, study)
            return spec.variant, params

        configs = grid.expand(corpus=corpus, tuned=resolve_tuned(grid, best))
    check_plan_unchanged(grid, {rid: r.config for rid, r in queue.runs(grid.name).items()})
    result = queue.enqueue(configs, retry_failed=args.retry_failed)
    where = describe_storage(args.storage, args.results)
    n = len(configs)
    if result.added or result.retried:
        msg = f"{grid.name}: queued {len(result.added)} runs"
        if result.retried:
            msg += f" and {len(result.retried)} failed runs again"
        if result.present:
            msg += f" ({len(result.present)} already queued or done)"
        print(f"{msg} in {where}")
        print(f"corpus: {configs[0].corpus}")
        import shlex

        from harness.files import default_results

        hint = "next: harness work"
        if args.results != default_results():
            hint += f" --results {shlex.quote(str(args.results))}"
        if args.storage is not None:
            hint += f" --storage {shlex.quote(args.storage)}"
        print(hint)
    else:
        print(f"{grid.name}: nothing to add: all {len(result.present)} runs already queued or done"
              if not result.failed else
              f"{grid.name}: nothing to add: {len(result.present)} of {n} runs already queued or done")
    if result.failed:
        print(f"{len(result.failed)} failed runs left as they are (pass --retry-failed to queue them "
              f"again): {', '.join(result.failed[:5])}{' ...' if len(result.failed) > 5 else ''}")
    return 0
