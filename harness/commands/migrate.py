"""Convert a queue of the previous layout (one Optuna study "harness" for every grid) into one study per grid.

Since 2026-12-01 each grid's runs live in an Optuna study named after the grid, so Optuna's own
tools (optuna.load_study, optuna-dashboard) show each grid with its values. A queue written
before then keeps every grid's runs in one study "harness"; every other command refuses such a
queue with one line naming this command. Converting copies each old trial into its grid's study
(a done run valued by its final validation NLL from its result file, a diverged run as a failed
trial with its reason, a queued run queued again there) and then removes the old study.

It converts only while none of the old study's runs is running (a worker of an older harness may
be writing to it; exit status 1 and a line saying how many are running otherwise: let them end,
then run it again). A conversion cut short is finished by the next one without copying a trial
twice. A queue with nothing to convert is left as it is (exit status 0).

example:
  harness migrate
  harness migrate --storage journal:/shared/rd/queue.journal --results /shared/rd/results
"""

from __future__ import annotations

import argparse
import sys

from harness.commands.options import add_storage


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_storage(parser)


def main(args: argparse.Namespace) -> int:
    import optuna

    from harness.scheduling.queue import legacy
    from harness.scheduling.queue.run_queue import LEGACY_STUDY, RunQueue
    from harness.scheduling.queue.storage import COMMAND_RETRY_S, describe_storage

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    queue = RunQueue.open(
        args.storage,
        args.results,
        retry_s=COMMAND_RETRY_S,
        log=lambda msg: print(msg, file=sys.stderr),
        legacy=True,  # the one command that reads the previous layout
    )
    where = describe_storage(args.storage, args.results)
    if LEGACY_STUDY not in queue.studies():
        print(f"queue {where}: no study of the previous layout; nothing to convert")
        return 0
    legacy.convert(queue, values=legacy.result_values(args.results), log=print)
    return 1 if LEGACY_STUDY in queue.studies() else 0
